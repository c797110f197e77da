"""A small Gemini API server for tests: the real wire format.

`POST /{v1,v1beta}/models/{model}:streamGenerateContent?alt=sse` answers with SSE `data:` lines,
each a `GenerateContentResponse` in the API's JSON (camelCase): a thought part, then the
text in chunks, or a `functionCall` part without an id (as Gemini often sends them), the
last chunk with `finishReason` and `usageMetadata`. Errors use Google's error body
(`{"error": {"code", "message", "status", "details"}}`): 429 RESOURCE_EXHAUSTED with a
`RetryInfo` delay, 400 INVALID_ARGUMENT for a key that is not valid and for a prompt over the
context window. What it answers is `tests.fake_behaviour.Script`.
Run: python -m tests.fake_gemini --port N
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

KEY = "AIza-test-fake-gemini-key"


def _error(answer: Answer) -> JSONResponse:
    if answer.error == "rate":
        retry = {
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": f"{answer.retry_after:g}s",
        }
        body = {
            "code": 429,
            "message": "Resource has been exhausted",
            "status": "RESOURCE_EXHAUSTED",
        }
        body["details"] = [retry]
    elif answer.error == "context":
        body = {
            "code": 400,
            "message": "The input token count (1048577) exceeds the maximum number of tokens "
            "allowed (1048576).",
            "status": "INVALID_ARGUMENT",
        }
    else:
        body = {
            "code": 400,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}
            ],
        }
    return JSONResponse({"error": body}, status_code=body["code"])


def _read(body: dict[str, Any]) -> tuple[str, str | None, int]:
    contents = body["contents"]
    tool_output = None
    for part in contents[-1].get("parts") or []:
        if "functionResponse" in part:
            tool_output = str((part["functionResponse"].get("response") or {}).get("output", ""))
    user = ""
    for content in reversed(contents):
        texts = [p["text"] for p in content.get("parts") or [] if "text" in p]
        if content.get("role") == "user" and texts:
            user = " ".join(texts)
            break
    chars = len(json.dumps(contents)) + len(json.dumps(body.get("systemInstruction") or ""))
    return user, tool_output, chars


def _chunk(parts: list[dict[str, Any]], finish: str | None = None, **extra: Any) -> bytes:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return f"data: {json.dumps({'candidates': [candidate], **extra})}\r\n\r\n".encode()


def build_app(script: Script | None = None, *, key: str = KEY) -> Starlette:
    script = script or Script("gemini")

    async def generate(request: Request) -> StreamingResponse | JSONResponse:
        body = await request.json()
        user, tool_output, chars = _read(body)
        if request.headers.get("x-goog-api-key") != key:
            return _error(Answer("error", status=400, error="auth"))
        offered = [
            d["name"] for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []
        ]
        answer = script.answer(
            user=user, tool_output=tool_output, tools=offered, prompt_chars=chars
        )
        if answer.kind == "error":
            return _error(answer)
        usage = {
            "promptTokenCount": input_tokens(chars),
            "candidatesTokenCount": 9,
            "thoughtsTokenCount": 3,
            "cachedContentTokenCount": 2,
            "totalTokenCount": input_tokens(chars) + 12,
        }

        async def stream() -> AsyncIterator[bytes]:
            yield _chunk([{"text": "thinking about it", "thought": True}])
            if answer.kind == "tool":
                call = {
                    "functionCall": {"name": answer.tool, "args": answer.arguments},
                    "thoughtSignature": "c2lnbmF0dXJl",
                }
                yield _chunk([call], "STOP", usageMetadata=usage, modelVersion="fake")
                return
            pieces = thirds(answer.text)
            for piece in pieces[:-1]:
                yield _chunk([{"text": piece}])
            yield _chunk([{"text": pieces[-1]}], "STOP", usageMetadata=usage, modelVersion="fake")

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def route(request: Request) -> StreamingResponse | JSONResponse:
        # `{version}/models/{model}:streamGenerateContent` (v1 and v1beta alike)
        if not request.path_params["rest"].endswith(":streamGenerateContent"):
            return JSONResponse({"error": {"code": 404, "status": "NOT_FOUND"}}, 404)
        return await generate(request)

    return Starlette(routes=[Route("/{version}/models/{rest:path}", route, methods=["POST"])])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(build_app(), host="127.0.0.1", port=args.port, log_level="warning")
