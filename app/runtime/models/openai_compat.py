"""OpenAI-compatible Chat Completions through the official `openai` SDK.

Streams text and reasoning deltas, assembles tool calls from their streamed fragments, and
reads provider-reported usage. The API key comes from the profile's credential reference and
never leaves this object: it is not in requests we log, events or snapshots. The SDK does not
retry (`max_retries=0`): the profile's policy does (`retry.py`), and failures are sorted by
`failures.classify`, never by the SDK's message (which may echo part of a rejected key).
"""

from __future__ import annotations

import json
from typing import Any

import openai

from app.runtime.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    OnDelta,
    ToolCallRequest,
)
from app.runtime.models.failures import ProviderError, classify, retry_hint


def _content_parts(content: Any) -> Any:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image":
            url = part.get("url") or f"data:{part['media_type']};base64,{part['data']}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif part.get("data"):
            parts.append(
                {
                    "type": "file",
                    "file": {
                        "file_data": f"data:{part['media_type']};base64,{part['data']}",
                        "filename": part.get("filename") or "file",
                    },
                }
            )
        else:
            parts.append({"type": "text", "text": f"[file: {part.get('url')}]"})
    return parts


def to_messages(request: ModelRequest, summary: str | None = None) -> list[dict[str, Any]]:
    """Memory items -> Chat Completions messages (tool calls grouped per assistant turn)."""
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    if summary:
        messages.append(
            {"role": "system", "content": f"Summary of earlier conversation: {summary}"}
        )
    for item in request.items:
        kind = item.get("type")
        if kind == "message":
            content = _content_parts(item["content"])
            if item["role"] != "user" and not isinstance(content, str):
                content = " ".join(p.get("text", "") for p in content if p.get("type") == "text")
            messages.append({"role": item["role"], "content": content})
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {"role": "tool", "tool_call_id": item["call_id"], "content": item.get("output", "")}
            )
    if request.continuation:
        messages.append({"role": "user", "content": request.continuation})
    return messages


def provider_error(
    exc: openai.APIError, *, profile: str, credential_setting: str | None
) -> ProviderError:
    """The ProviderError for an SDK exception (a status error, or no answer at all)."""
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error", body) if isinstance(body, dict) else {}
        text = " ".join(
            str(error.get(k) or "") for k in ("code", "type", "message") if isinstance(error, dict)
        )
        return classify(
            profile=profile,
            status=exc.status_code,
            text=text,
            retry_after=retry_hint(exc.response.headers),
            credential_setting=credential_setting,
        )
    return classify(profile=profile, status=None)


class OpenAICompatibleModel:
    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str,
        default_model: str,
        timeout: float = 60.0,
        profile: str = "openai",
        credential_setting: str | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout, max_retries=0
        )
        self._default_model = default_model
        self._profile = profile
        self._credential_setting = credential_setting
        self._max_output_tokens = max_output_tokens

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        kwargs: dict[str, Any] = {
            "model": request.model or self._default_model,
            "messages": to_messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            kwargs["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        if request.max_output_tokens or self._max_output_tokens:
            kwargs["max_tokens"] = request.max_output_tokens or self._max_output_tokens
        try:
            return await self._stream(kwargs, on_delta)
        except openai.APIError as exc:
            raise provider_error(
                exc, profile=self._profile, credential_setting=self._credential_setting
            ) from None

    async def _stream(self, kwargs: dict[str, Any], on_delta: OnDelta) -> ModelResponse:
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish = "stop"
        usage: dict[str, int] = {}
        stream = await self._client.chat.completions.create(**kwargs)
        async for chunk in stream:
            if chunk.usage is not None:
                usage = _usage(chunk.usage)
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                    on_delta({"type": "delta", "text": delta.content})
                thought = getattr(delta, "reasoning_content", None) or (
                    (delta.model_extra or {}).get("reasoning_content")
                    if delta.model_extra
                    else None
                )
                if thought:
                    reasoning.append(thought)
                    on_delta({"type": "reasoning_delta", "text": thought})
                for fragment in delta.tool_calls or []:
                    call = calls.setdefault(fragment.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] = fragment.id or call["id"]
                    if fragment.function is not None:
                        call["name"] += fragment.function.name or ""
                        call["arguments"] += fragment.function.arguments or ""
                if choice.finish_reason:
                    finish = choice.finish_reason
        tool_calls = [
            ToolCallRequest(call_id=c["id"], name=c["name"], arguments=c["arguments"] or "{}")
            for _, c in sorted(calls.items())
        ]
        for request_call in tool_calls:
            try:
                json.loads(request_call.arguments)
            except (ValueError, RecursionError) as exc:  # nested too deep for the parser
                raise ModelError(
                    f"the model sent malformed arguments for {request_call.name}"
                ) from exc
        return ModelResponse(
            text="".join(text),
            tool_calls=tool_calls,
            usage=usage,
            finish_reason=finish,
            needs_continuation=finish == "length" and not tool_calls,
            reasoning="".join(reasoning) or None,
            usage_reported=bool(usage),
        )


def _usage(reported: Any) -> dict[str, int]:
    """Chat Completions usage in our names; cached prompt tokens when the endpoint says."""
    usage = {
        "input_tokens": reported.prompt_tokens or 0,
        "output_tokens": reported.completion_tokens or 0,
        "total_tokens": reported.total_tokens or 0,
    }
    details = getattr(reported, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if cached:
        usage["cache_read_input_tokens"] = int(cached)
    return usage
