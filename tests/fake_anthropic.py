"""A small Anthropic Messages API server for tests: the real wire format.

`POST /v1/messages` with `stream: true` answers with the SSE event sequence of the real API
(`message_start` with input usage and cache figures, `content_block_start` / `_delta` /
`_stop` for a thinking block when thinking is asked for, then text or `tool_use` with its
`input_json_delta` fragments, `message_delta` with the stop reason and output usage,
`message_stop`). Errors use the API's error body (`{"type": "error", "error": {...}}`), a
429 carries `retry-after`. What it answers is `tests.fake_behaviour.Script`.
Run: python -m tests.fake_anthropic --port N
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from tests.fake_behaviour import Answer, Script, input_tokens, thirds

KEY = "sk-ant-test-fake-key"
_ERRORS = {
    "auth": ("authentication_error", "invalid x-api-key"),
    "rate": ("rate_limit_error", "Number of request tokens has exceeded your rate limit"),
    "context": ("invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum"),
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content if b.get("type") == "text")


def _read(body: dict[str, Any]) -> tuple[str, str | None, int]:
    """(latest user text, the output answered by the last turn if any, prompt characters)."""
    messages = body["messages"]
    last = messages[-1]
    tool_output = None
    if last["role"] == "user" and not isinstance(last["content"], str):
        results = [b for b in last["content"] if b.get("type") == "tool_result"]
        if results:
            tool_output = str(results[-1].get("content", ""))
    user = ""
    for message in reversed(messages):
        text = _text_of(message["content"]) if message["role"] == "user" else ""
        if text:
            user = text
            break
    chars = len(json.dumps(messages)) + len(str(body.get("system", "")))
    return user, tool_output, chars


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _blocks(answer: Answer, thinking: bool) -> list[bytes]:
    out: list[bytes] = []
    index = 0
    if thinking:
        out.append(
            _event(
                "content_block_start",
                {
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                },
            )
        )
        delta = {"type": "thinking_delta", "thinking": "thinking about it"}
        out.append(_event("content_block_delta", {"index": 0, "delta": delta}))
        signature = {"type": "signature_delta", "signature": "c2lnbmF0dXJl"}
        out.append(_event("content_block_delta", {"index": 0, "delta": signature}))
        out.append(_event("content_block_stop", {"index": 0}))
        index = 1
    if answer.kind == "tool":
        block = {"type": "tool_use", "id": "toolu_fake1", "name": answer.tool, "input": {}}
        out.append(_event("content_block_start", {"index": index, "content_block": block}))
        raw = json.dumps(answer.arguments)
        for part in (raw[: len(raw) // 2], raw[len(raw) // 2 :]):
            delta = {"type": "input_json_delta", "partial_json": part}
            out.append(_event("content_block_delta", {"index": index, "delta": delta}))
    else:
        block = {"type": "text", "text": ""}
        out.append(_event("content_block_start", {"index": index, "content_block": block}))
        for part in thirds(answer.text):
            delta = {"type": "text_delta", "text": part}
            out.append(_event("content_block_delta", {"index": index, "delta": delta}))
    out.append(_event("content_block_stop", {"index": index}))
    return out


def _thinking_refused(body: dict[str, Any]) -> bool:
    """As the API does with thinking on: a tool-calling assistant turn must start with the
    thinking block (and its signature) it was made with."""
    if "thinking" not in body:
        return False
    for message in body["messages"]:
        content = message["content"]
        if message["role"] != "assistant" or isinstance(content, str):
            continue
        if any(b.get("type") == "tool_use" for b in content):
            first = content[0]
            if first.get("type") != "thinking" or first.get("signature") != "c2lnbmF0dXJl":
                return True
    return False


def build_app(script: Script | None = None, *, key: str = KEY) -> Starlette:
    script = script or Script("anthropic")

    async def messages(request: Request) -> StreamingResponse | JSONResponse:
        body = await request.json()
        user, tool_output, chars = _read(body)
        # The API takes the key as `x-api-key`; newer SDKs send it as a bearer token.
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if key not in (request.headers.get("x-api-key"), bearer):
            answer = Answer("error", status=401, error="auth")
        else:
            tools = [t["name"] for t in body.get("tools") or []]
            answer = script.answer(
                user=user, tool_output=tool_output, tools=tools, prompt_chars=chars
            )
        if answer.kind != "error" and _thinking_refused(body):
            error = {
                "type": "invalid_request_error",
                "message": "Expected `thinking` or `redacted_thinking`, but found `tool_use`.",
            }
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        if answer.kind == "error":
            kind, message = _ERRORS[answer.error]
            headers = {"retry-after": f"{answer.retry_after:g}"} if answer.error == "rate" else {}
            return JSONResponse(
                {"type": "error", "error": {"type": kind, "message": message}},
                status_code=answer.status,
                headers=headers,
            )
        usage = {
            "input_tokens": input_tokens(chars) - 4,
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 4,
        }
        start = {
            "message": {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            }
        }
        stop = "tool_use" if answer.kind == "tool" else "end_turn"

        async def stream() -> AsyncIterator[bytes]:
            yield _event("message_start", start)
            for frame in _blocks(answer, thinking="thinking" in body):
                yield frame
            end = {"delta": {"stop_reason": stop, "stop_sequence": None}}
            yield _event("message_delta", {**end, "usage": {"output_tokens": 9}})
            yield _event("message_stop", {})

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(build_app(), host="127.0.0.1", port=args.port, log_level="warning")
