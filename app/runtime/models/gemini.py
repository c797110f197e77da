"""Google's Gemini API through the official `google-genai` SDK.

Streams text deltas and thought parts (as reasoning deltas), turns function calls into tool
calls (Gemini may send them without an id: one is made up, and the output is matched back
by name), and reports usage (`usage_metadata`: prompt, candidates, cached and thought
tokens). Memory items become `contents`: the user's turns, the model's (`role: model`),
`function_call` parts and `function_response` parts. The SDK's own retries, automatic
function calling and automatic continuation are off: the loop controller and the profile's
retry policy do those things, visibly. A function call's `thought_signature` (which thinking
models want back with the call) is kept in a bounded per-process cache by call id and sent
back with it; memory does not hold provider artefacts.
"""

from __future__ import annotations

import collections
import json
import re
import uuid
from typing import Any

from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from app.runtime.models.base import ModelRequest, ModelResponse, OnDelta, ToolCallRequest
from app.runtime.models.failures import ProviderError, classify, retry_hint
from app.runtime.models.profiles import ProfileConfig

_DELAY = re.compile(r"^([\d.]+)s$")
SIGNATURE_CACHE = 1024


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content if p.get("type") == "text")


def _user_parts(content: Any) -> list[types.Part]:
    if isinstance(content, str):
        return [types.Part(text=content)]
    parts: list[types.Part] = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            parts.append(types.Part(text=part["text"]))
        elif part.get("data"):
            import base64

            blob = types.Blob(mime_type=part["media_type"], data=base64.b64decode(part["data"]))
            parts.append(types.Part(inline_data=blob))
        else:
            data = types.FileData(file_uri=part.get("url"), mime_type=part.get("media_type"))
            parts.append(types.Part(file_data=data))
    return parts


def to_contents(
    request: ModelRequest, signatures: dict[str, bytes] | None = None
) -> list[types.Content]:
    """Memory items -> Gemini contents (consecutive parts of one role in one content).

    `signatures` maps a call id to the thought signature its function call came with.
    """
    contents: list[types.Content] = []
    signatures = signatures or {}
    names: dict[str, str] = {}

    def add(role: str, parts: list[types.Part]) -> None:
        if contents and contents[-1].role == role:
            contents[-1].parts = [*(contents[-1].parts or []), *parts]
        else:
            contents.append(types.Content(role=role, parts=parts))

    for item in request.items:
        kind = item.get("type")
        if kind == "message" and item["role"] == "user":
            add("user", _user_parts(item["content"]))
        elif kind == "message" and item["role"] == "assistant":
            if _text(item["content"]):
                add("model", [types.Part(text=_text(item["content"]))])
        elif kind == "message":
            add("user", [types.Part(text=f"[system] {_text(item['content'])}")])
        elif kind == "function_call":
            names[item["call_id"]] = item["name"]
            try:
                args = json.loads(item.get("arguments") or "{}")
            except ValueError:
                args = {}
            call = types.FunctionCall(id=item["call_id"], name=item["name"], args=args)
            signature = signatures.get(item["call_id"])
            add("model", [types.Part(function_call=call, thought_signature=signature)])
        elif kind == "function_call_output":
            response = types.FunctionResponse(
                id=item["call_id"],
                name=names.get(item["call_id"], "tool"),
                response={"output": item.get("output", "")},
            )
            add("user", [types.Part(function_response=response)])
    if request.continuation:
        add("user", [types.Part(text=request.continuation)])
    return contents


def _retry_delay(details: Any) -> float | None:
    """Gemini's RetryInfo (`"retryDelay": "2s"`) from an error body, if any."""
    error = details.get("error", details) if isinstance(details, dict) else {}
    for detail in error.get("details") or [] if isinstance(error, dict) else []:
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        match = _DELAY.match(delay or "")
        if match:
            return float(match.group(1))
    return None


def provider_error(
    exc: genai_errors.APIError, *, profile: str, credential_setting: str | None
) -> ProviderError:
    headers = getattr(exc.response, "headers", None)
    hint = retry_hint(headers) if headers is not None else None
    text = f"{exc.status or ''} {exc.message or ''}"
    return classify(
        profile=profile,
        status=exc.code or None,
        text=text,
        retry_after=hint if hint is not None else _retry_delay(exc.details),
        credential_setting=credential_setting,
    )


class GeminiModel:
    """One Gemini profile's client."""

    def __init__(
        self,
        profile: str,
        config: ProfileConfig,
        api_key: str,
        *,
        credential_setting: str | None = None,
    ) -> None:
        options = types.HttpOptions(
            base_url=config.base_url,
            timeout=int(config.timeout_seconds * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        self._client = genai.Client(api_key=api_key or "unused", http_options=options)
        self._profile = profile
        self._config = config
        self._credential_setting = credential_setting
        self._signatures: collections.OrderedDict[str, bytes] = collections.OrderedDict()

    def _config_of(self, request: ModelRequest) -> types.GenerateContentConfig:
        tools: types.ToolListUnion | None = None
        if request.tools:
            declarations = [
                types.FunctionDeclaration(
                    name=t.name, description=t.description, parameters_json_schema=t.parameters
                )
                for t in request.tools
            ]
            tools = [types.Tool(function_declarations=declarations)]
        thinking = None
        if self._config.thinking_budget_tokens is not None:
            thinking = types.ThinkingConfig(
                include_thoughts=True, thinking_budget=self._config.thinking_budget_tokens
            )
        return types.GenerateContentConfig(
            system_instruction=request.instructions or None,
            tools=tools,
            max_output_tokens=request.max_output_tokens or self._config.max_output_tokens,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            automatic_continuation=False,
            thinking_config=thinking,
        )

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        try:
            stream = await self._client.aio.models.generate_content_stream(
                model=request.model or self._config.default_model or "",
                contents=to_contents(request, self._signatures),
                config=self._config_of(request),
            )
            assembler = _Assembler(on_delta)
            async for chunk in stream:
                assembler.add(chunk)
            for call_id, signature in assembler.signatures.items():
                self._signatures[call_id] = signature
            while len(self._signatures) > SIGNATURE_CACHE:
                self._signatures.popitem(last=False)
            return assembler.response()
        except genai_errors.APIError as exc:
            raise provider_error(
                exc, profile=self._profile, credential_setting=self._credential_setting
            ) from None
        except (OSError, TimeoutError) as exc:  # no answer at all (refused, reset, timed out)
            raise classify(profile=self._profile, status=None) from exc
        except Exception as exc:
            # The transport's own errors (httpx's) are not OSErrors; none carries the key.
            if type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore"):
                raise classify(profile=self._profile, status=None) from None
            raise


class _Assembler:
    """Folds streamed GenerateContentResponse chunks into a ModelResponse."""

    def __init__(self, on_delta: OnDelta) -> None:
        self.on_delta = on_delta
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[ToolCallRequest] = []
        self.usage: dict[str, int] = {}
        self.finish = "stop"
        self.signatures: dict[str, bytes] = {}

    def add(self, chunk: types.GenerateContentResponse) -> None:
        if chunk.usage_metadata is not None:
            self._count(chunk.usage_metadata)
        for candidate in chunk.candidates or []:
            if candidate.finish_reason is not None:
                self.finish = str(candidate.finish_reason.value).lower()
            for part in (candidate.content.parts or []) if candidate.content else []:
                self._part(part)

    def _part(self, part: types.Part) -> None:
        if part.function_call is not None:
            call = part.function_call
            call_id = call.id or f"call_{uuid.uuid4().hex[:16]}"
            if part.thought_signature:
                self.signatures[call_id] = part.thought_signature
            arguments = json.dumps(call.args or {})
            self.calls.append(ToolCallRequest(call_id, call.name or "", arguments))
        elif part.text and part.thought:
            self.reasoning.append(part.text)
            self.on_delta({"type": "reasoning_delta", "text": part.text})
        elif part.text:
            self.text.append(part.text)
            self.on_delta({"type": "delta", "text": part.text})

    def _count(self, meta: types.GenerateContentResponseUsageMetadata) -> None:
        prompt = meta.prompt_token_count or 0
        output = (meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0)
        self.usage = {
            "input_tokens": prompt,
            "output_tokens": output,
            "total_tokens": meta.total_token_count or prompt + output,
        }
        if meta.cached_content_token_count:
            self.usage["cache_read_input_tokens"] = meta.cached_content_token_count
        if meta.thoughts_token_count:
            self.usage["reasoning_tokens"] = meta.thoughts_token_count

    def response(self) -> ModelResponse:
        finish = "tool_calls" if self.calls else self.finish
        if finish == "max_tokens":
            finish = "length"
        return ModelResponse(
            text="".join(self.text),
            tool_calls=self.calls,
            usage=self.usage,
            finish_reason=finish,
            needs_continuation=finish == "length" and not self.calls,
            reasoning="".join(self.reasoning) or None,
            usage_reported=bool(self.usage),
        )
