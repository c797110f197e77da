"""Request body cap and JSON shape check, enforced before any JSON is parsed.

FastAPI has no body limit of its own. This ASGI middleware refuses a declared
Content-Length over the cap at once, and counts the bytes of a chunked body as they arrive,
answering 413 as soon as the count passes the cap; memory use is bounded by the cap.

A JSON body that arrives whole is then scanned (`scan_json_bytes`, linear, no recursion)
and refused with 422 when it nests deeper than `MAX_JSON_DEPTH` (`json_too_deep`) or holds
NaN / Infinity (`non_finite_number`): the parser and every later reader of a stored value
walk it recursively, so depth has to be bounded before anything parses it.

The query is held to its shape here too, before routing: no NUL (400), and no repeat of a
parameter its route reads one value of (422, `app.api.http.query`).
"""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.http.problems import MEDIA_TYPE, problem_body, problem_response
from app.api.http.query import SingleValuedQuery
from app.runtime.errors import InvalidRequest
from app.runtime.session.json_limits import scan_json_bytes


class BodyLimitMiddleware:
    def __init__(
        self, app: ASGIApp, *, max_bytes: int, query: SingleValuedQuery | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.query = query

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _has_nul(scope):
            # PostgreSQL cannot compare or store NUL: refuse it in the path or query at once.
            response = problem_response(
                None,
                status=400,
                code="invalid_characters",
                title="Invalid characters",
                detail="the path or query contains a NUL character",
            )
            await response(scope, receive, send)
            return
        if scope["type"] == "http" and self.query is not None:
            repeated = self.query.refusal(scope)
            if repeated is not None:
                await repeated(scope, receive, send)
                return
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if _is_json(headers.get(b"content-type")):
            try:
                scan_json_bytes(body)
            except InvalidRequest as exc:
                refusal = problem_body(exc, scope.get("path"))
                response = JSONResponse(refusal, status_code=422, media_type=MEDIA_TYPE)
                await response(scope, receive, send)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem_response(
            None,
            status=413,
            code="payload_too_large",
            title="Payload too large",
            detail=f"request bodies are limited to {self.max_bytes} bytes",
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)


def _is_json(content_type: bytes | None) -> bool:
    """Whether FastAPI will parse this body as JSON: no content type, or a JSON media type."""
    return content_type is None or b"json" in content_type.lower()


def _has_nul(scope: Scope) -> bool:
    query = scope.get("query_string", b"").lower()
    return "\x00" in scope.get("path", "") or b"%00" in query or b"\x00" in query
