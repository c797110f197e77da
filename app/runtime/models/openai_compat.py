"""OpenAI-compatible Chat Completions through the official `openai` SDK.

Streams text and reasoning deltas, assembles tool calls from their streamed fragments, and
reads provider-reported usage. The API key comes from server settings and never leaves this
object: it is not in requests we log, events or snapshots.
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


class OpenAICompatibleModel:
    def __init__(
        self, *, base_url: str | None, api_key: str, default_model: str, timeout: float = 60.0
    ) -> None:
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout, max_retries=1
        )
        self._default_model = default_model

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
        if request.max_output_tokens:
            kwargs["max_tokens"] = request.max_output_tokens
        try:
            return await self._stream(kwargs, on_delta)
        except openai.APIError as exc:
            # The SDK's message never contains our key; the status helps operators.
            status = getattr(exc, "status_code", None)
            raise ModelError(f"model endpoint error ({status or type(exc).__name__})") from exc

    async def _stream(self, kwargs: dict[str, Any], on_delta: OnDelta) -> ModelResponse:
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish = "stop"
        usage: dict[str, int] = {}
        stream = await self._client.chat.completions.create(**kwargs)
        async for chunk in stream:
            if chunk.usage is not None:
                usage = {
                    "input_tokens": chunk.usage.prompt_tokens or 0,
                    "output_tokens": chunk.usage.completion_tokens or 0,
                    "total_tokens": chunk.usage.total_tokens or 0,
                }
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
        for call in tool_calls:
            try:
                json.loads(call.arguments)
            except (ValueError, RecursionError) as exc:  # nested too deep for the parser
                raise ModelError(f"the model sent malformed arguments for {call.name}") from exc
        return ModelResponse(
            text="".join(text),
            tool_calls=tool_calls,
            usage=usage,
            finish_reason=finish,
            needs_continuation=finish == "length" and not tool_calls,
            reasoning="".join(reasoning) or None,
        )
