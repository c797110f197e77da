"""Anthropic's Messages API through the official `anthropic` SDK.

Streams text deltas, extended thinking as reasoning deltas (when the profile gives a
`thinking_budget_tokens`), assembles tool calls from their `input_json_delta` fragments, and
reports usage with the cache figures. Memory items become Messages turns: the instructions
are the `system` prompt, a function call is a `tool_use` block of the assistant's turn, and
its output a `tool_result` block of the next user turn (consecutive items of one role are
merged into one turn, as the API requires alternating roles).

Extended thinking and tools: the API wants the thinking blocks (with their signatures) of
an assistant turn that called tools sent back with that turn. Memory does not keep them
(they are the provider's, not the conversation's), so the client keeps the blocks of recent
tool-calling turns in a bounded per-process cache, keyed by the turn's first tool call, and
sends them back; when they are not known (after a restart, or a turn another model made),
that request goes without thinking, which the API accepts.

The key is handed to the SDK client and kept nowhere else; the SDK does not retry
(`max_retries=0`): the profile's policy does.
"""

from __future__ import annotations

import collections
import json
from typing import Any

import anthropic

from app.runtime.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    OnDelta,
    ToolCallRequest,
)
from app.runtime.models.failures import ProviderError, classify, retry_hint
from app.runtime.models.profiles import ProfileConfig

DEFAULT_MAX_TOKENS = 4096
# Tool-calling turns whose thinking blocks are kept to be sent back (per client).
THINKING_CACHE = 256


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image" and part.get("data"):
            source = {"type": "base64", "media_type": part["media_type"], "data": part["data"]}
            blocks.append({"type": "image", "source": source})
        elif kind == "image":
            blocks.append({"type": "image", "source": {"type": "url", "url": part["url"]}})
        else:
            name = part.get("filename") or part.get("url") or "file"
            blocks.append({"type": "text", "text": f"[file: {name}]"})
    return blocks


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content if p.get("type") == "text")


def to_messages(
    request: ModelRequest, thinking: dict[str, list[dict[str, Any]]] | None = None
) -> list[dict[str, Any]]:
    """Memory items -> Messages API turns (alternating roles, tool results in user turns).

    `thinking` maps a turn's first tool call id to the thinking blocks to send back with it.
    """
    turns: list[dict[str, Any]] = []
    thinking = thinking or {}

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": list(blocks)})

    for item in request.items:
        kind = item.get("type")
        if kind == "message" and item["role"] == "user":
            add("user", _user_blocks(item["content"]))
        elif kind == "message" and item["role"] == "assistant":
            text = _text(item["content"])
            if text:
                add("assistant", [{"type": "text", "text": text}])
        elif kind == "message":  # a system item inside the conversation: tell it as text
            add("user", [{"type": "text", "text": f"[system] {_text(item['content'])}"}])
        elif kind == "function_call":
            try:
                arguments = json.loads(item.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            block = {
                "type": "tool_use",
                "id": item["call_id"],
                "name": item["name"],
                "input": arguments if isinstance(arguments, dict) else {"value": arguments},
            }
            blocks = thinking.get(item["call_id"])
            if blocks and turns and turns[-1]["role"] == "assistant":
                # Thinking comes first in its turn: the turn's text (if any) goes after it.
                turns[-1]["content"][:0] = blocks
            elif blocks:
                add("assistant", list(blocks))
            add("assistant", [block])
        elif kind == "function_call_output":
            block = {
                "type": "tool_result",
                "tool_use_id": item["call_id"],
                "content": item.get("output", ""),
            }
            add("user", [block])
    if request.continuation:
        add("user", [{"type": "text", "text": request.continuation}])
    return turns


def provider_error(
    exc: anthropic.APIError, *, profile: str, credential_setting: str | None
) -> ProviderError:
    if isinstance(exc, anthropic.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error") if isinstance(body, dict) else None
        text = json.dumps(error) if isinstance(error, dict) else ""
        return classify(
            profile=profile,
            status=exc.status_code,
            text=text,
            retry_after=retry_hint(exc.response.headers),
            credential_setting=credential_setting,
        )
    return classify(profile=profile, status=None)


class AnthropicModel:
    """One Anthropic profile's client."""

    def __init__(
        self,
        profile: str,
        config: ProfileConfig,
        api_key: str,
        *,
        credential_setting: str | None = None,
    ) -> None:
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key or "unused",
            base_url=config.base_url,
            timeout=config.timeout_seconds,
            max_retries=0,
        )
        self._profile = profile
        self._config = config
        self._credential_setting = credential_setting
        self._thinking: collections.OrderedDict[str, list[dict[str, Any]]] = (
            collections.OrderedDict()
        )

    def _arguments(self, request: ModelRequest) -> dict[str, Any]:
        messages = to_messages(request, self._thinking)
        kwargs: dict[str, Any] = {
            "model": request.model or self._config.default_model or "",
            "messages": messages,
            "max_tokens": request.max_output_tokens
            or self._config.max_output_tokens
            or DEFAULT_MAX_TOKENS,
            "stream": True,
        }
        if request.instructions:
            kwargs["system"] = request.instructions
        if request.tools:
            kwargs["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        budget = self._config.thinking_budget_tokens
        if budget is not None and _thinking_intact(messages):
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": budget}
            kwargs["max_tokens"] = max(kwargs["max_tokens"], budget + 1024)
        return kwargs

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        try:
            stream = await self._client.messages.create(**self._arguments(request))
            assembler = _Assembler(on_delta)
            response = await assembler.read(stream)
        except anthropic.APIError as exc:
            raise provider_error(
                exc, profile=self._profile, credential_setting=self._credential_setting
            ) from None
        if response.tool_calls and assembler.thinking_blocks:
            self._thinking[response.tool_calls[0].call_id] = assembler.thinking_blocks
            while len(self._thinking) > THINKING_CACHE:
                self._thinking.popitem(last=False)
        return response


def _thinking_intact(messages: list[dict[str, Any]]) -> bool:
    """Thinking may be on unless the newest assistant turn called tools without the thinking
    blocks it was made with (the API refuses that)."""
    for turn in reversed(messages):
        if turn["role"] != "assistant":
            continue
        kinds = [block.get("type") for block in turn["content"]]
        if "tool_use" not in kinds:
            return True
        return kinds[0] in ("thinking", "redacted_thinking")
    return True


class _Assembler:
    """Folds the raw stream events of one message into a ModelResponse."""

    def __init__(self, on_delta: OnDelta) -> None:
        self.on_delta = on_delta
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.usage: dict[str, int] = {}
        self.stop = "end_turn"
        self.blocks: dict[int, dict[str, Any]] = {}  # thinking blocks being streamed

    @property
    def thinking_blocks(self) -> list[dict[str, Any]]:
        return [self.blocks[i] for i in sorted(self.blocks)]

    async def read(self, stream: Any) -> ModelResponse:
        async for event in stream:
            handler = getattr(self, f"_on_{event.type}", None)
            if handler is not None:
                handler(event)
        return self._response()

    def _on_message_start(self, event: Any) -> None:
        self._count(event.message.usage)

    def _on_content_block_start(self, event: Any) -> None:
        block = event.content_block
        if block.type == "tool_use":
            self.calls[event.index] = {"id": block.id, "name": block.name, "arguments": ""}
        elif block.type == "thinking":
            self.blocks[event.index] = {"type": "thinking", "thinking": "", "signature": ""}
        elif block.type == "redacted_thinking":
            self.blocks[event.index] = {"type": "redacted_thinking", "data": block.data}

    def _on_content_block_delta(self, event: Any) -> None:
        delta = event.delta
        if delta.type == "text_delta":
            self.text.append(delta.text)
            self.on_delta({"type": "delta", "text": delta.text})
        elif delta.type == "thinking_delta":
            self.reasoning.append(delta.thinking)
            self.on_delta({"type": "reasoning_delta", "text": delta.thinking})
            if event.index in self.blocks:
                self.blocks[event.index]["thinking"] += delta.thinking
        elif delta.type == "signature_delta" and event.index in self.blocks:
            self.blocks[event.index]["signature"] += delta.signature
        elif delta.type == "input_json_delta" and event.index in self.calls:
            self.calls[event.index]["arguments"] += delta.partial_json

    def _on_message_delta(self, event: Any) -> None:
        if event.delta.stop_reason:
            self.stop = event.delta.stop_reason
        self._count(event.usage)

    def _on_error(self, event: Any) -> None:  # an error event inside a 200 stream
        raise ModelError("the provider reported an error inside the stream")

    def _count(self, usage: Any) -> None:
        """Usage arrives in parts: input figures at the start, output at the end."""
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        ):
            value = getattr(usage, name, None)
            if value is not None:
                self.usage[name] = int(value)

    def _response(self) -> ModelResponse:
        calls = [
            ToolCallRequest(call_id=c["id"], name=c["name"], arguments=c["arguments"] or "{}")
            for _, c in sorted(self.calls.items())
        ]
        for call in calls:
            try:
                json.loads(call.arguments)
            except (ValueError, RecursionError) as exc:
                raise ModelError(f"the model sent malformed arguments for {call.name}") from exc
        usage = dict(self.usage)
        if usage:
            # Anthropic counts cached prompt tokens apart; ours is the whole prompt.
            prompt = (
                usage.get("input_tokens", 0)
                + usage.get("cache_creation_input_tokens", 0)
                + usage.get("cache_read_input_tokens", 0)
            )
            usage["input_tokens"] = prompt
            usage["total_tokens"] = prompt + usage.get("output_tokens", 0)
        finish = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}.get(
            self.stop, self.stop
        )
        return ModelResponse(
            text="".join(self.text),
            tool_calls=calls,
            usage=usage,
            finish_reason=finish,
            needs_continuation=finish == "length" and not calls,
            reasoning="".join(self.reasoning) or None,
            usage_reported=bool(usage),
        )
