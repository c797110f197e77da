"""A tiny OpenAI-compatible Chat Completions server for tests: the real wire format.

It streams `chat.completion.chunk` objects as SSE `data:` lines, ends with `data: [DONE]`,
sends tool calls as fragmented deltas, reasoning as `reasoning_content` deltas, and a final
usage chunk when `stream_options.include_usage` is set. Behaviour:
- the last message is a tool result  -> "The tool said: <content>"
- the last user message mentions "weather" and tools are offered -> a `weather` tool call
- otherwise -> "openai echo: <text>" in three chunks, after a reasoning delta
Before those, `tests.fake_behaviour.Script` decides the error paths and `[call:NAME {...}]`
tool calls: 429 with `retry-after`, `context_length_exceeded`, and 401 for `[auth]`.
Run: python -m tests.fake_openai --port N
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from tests.fake_behaviour import Answer, Script


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _plan(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        text = f"The tool said: {last['content']}"
        return [_chunk({"role": "assistant", "content": text}), _chunk({}, "stop")]
    user = next(m for m in reversed(messages) if m["role"] == "user")
    content = (
        user["content"]
        if isinstance(user["content"], str)
        else " ".join(p.get("text", "") for p in user["content"] if p.get("type") == "text")
    )
    if "weather" in content and body.get("tools"):
        return [
            _chunk(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_w1",
                            "type": "function",
                            "function": {"name": "weather", "arguments": ""},
                        }
                    ],
                }
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            _chunk({}, "tool_calls"),
        ]
    text = f"openai echo: {content}"
    third = len(text) // 3
    return [
        _chunk({"role": "assistant", "reasoning_content": "thinking about it"}),
        _chunk({"content": text[:third]}),
        _chunk({"content": text[third : 2 * third]}),
        _chunk({"content": text[2 * third :]}),
        _chunk({}, "stop"),
    ]


SCRIPT = Script("openai")
_ERRORS = {
    "auth": ("Incorrect API key provided: sk-test-***-key", "invalid_api_key"),
    "rate": ("Rate limit reached for requests", "rate_limit_exceeded"),
    "context": (
        "This model's maximum context length is 8192 tokens. However, your messages resulted "
        "in 9000 tokens.",
        "context_length_exceeded",
    ),
}


def _scripted(body: dict[str, Any]) -> Answer:
    messages = body.get("messages") or []
    tool_output = messages[-1]["content"] if messages and messages[-1]["role"] == "tool" else None
    users = [m for m in messages if m["role"] == "user" and isinstance(m.get("content"), str)]
    tools = [t["function"]["name"] for t in body.get("tools") or []]
    return SCRIPT.answer(
        user=users[-1]["content"] if users else "",
        tool_output=tool_output,
        tools=tools,
        prompt_chars=len(json.dumps(messages)),
    )


def _tool_chunks(answer: Answer) -> list[dict[str, Any]]:
    raw = json.dumps(answer.arguments)
    first = {"index": 0, "id": "call_s1", "type": "function", "function": {"name": answer.tool}}
    return [
        _chunk(
            {
                "role": "assistant",
                "tool_calls": [{**first, "function": {**first["function"], "arguments": ""}}],
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": raw[: len(raw) // 2]}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": raw[len(raw) // 2 :]}}]}),
        _chunk({}, "tool_calls"),
    ]


KEY = "sk-test-fake-key"


async def completions(request: Request, key: str = KEY) -> StreamingResponse | JSONResponse:
    if request.headers.get("authorization") != f"Bearer {key}":
        return JSONResponse({"error": {"message": "bad key", "type": "auth"}}, status_code=401)
    body = await request.json()
    answer = _scripted(body)
    if answer.kind == "error":
        message, code = _ERRORS[answer.error]
        headers = {"retry-after": f"{answer.retry_after:g}"} if answer.error == "rate" else {}
        error = {"message": message, "type": "invalid_request_error", "code": code}
        return JSONResponse({"error": error}, status_code=answer.status, headers=headers)
    chunks = _tool_chunks(answer) if answer.kind == "tool" else _plan(body)

    async def stream() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
            final = {**_chunk({}), "choices": [], "usage": usage}
            yield f"data: {json.dumps(final)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


def build_app(*, key: str = KEY) -> Starlette:
    """The fake, accepting `key` (a test's canary, say) as its only key."""

    async def route(request: Request) -> StreamingResponse | JSONResponse:
        return await completions(request, key)

    return Starlette(routes=[Route("/v1/chat/completions", route, methods=["POST"])])


app = build_app()

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
