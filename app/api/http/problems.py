"""RFC 9457 problem details: the one table from domain errors to HTTP, and the handlers.

Routes never build error responses themselves: they let `AgentSessionError`s rise, and the
handlers here render `application/problem+json` with `type`, `title`, `status`, `detail`,
`instance` and a stable `code` (plus machine fields such as `current_seq`). A 500 carries no
exception text; the exception is logged with the request id.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.runtime import errors as e
from app.runtime.memory.compaction import CompactionFailed
from app.runtime.models.base import ModelError

log = logging.getLogger("app.api")

# How database outages arrive; the store's signature is installed with the handlers
# (`install_problem_handlers`), so that this layer never imports the store.
_outages = e.OutageSignature()

PROBLEM_TYPE_BASE = "urn:asr:problem:"
MEDIA_TYPE = "application/problem+json"

# Most specific first: the first class an error is an instance of decides.
STATUS_BY_ERROR: list[tuple[type[e.AgentSessionError], int, str]] = [
    (e.Unauthorized, 401, "Unauthorized"),
    (CompactionFailed, 502, "Compaction failed"),
    (ModelError, 502, "Model call failed"),
    (e.NotFound, 404, "Not found"),
    (e.VersionConflict, 412, "Precondition failed"),
    (e.Conflict, 409, "Conflict"),
    (e.PayloadTooLarge, 413, "Payload too large"),
    (e.TooManyRequests, 429, "Too many requests"),
    (e.TooManyStreams, 429, "Too many requests"),
    (e.InvalidRequest, 422, "Invalid request"),
    (e.DatabaseUnavailable, 503, "Service unavailable"),
]


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    code: str


def problem_response(
    request: Request | None,
    *,
    status: int,
    code: str,
    title: str,
    detail: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + code,
        "title": title,
        "status": status,
        "detail": detail,
        "instance": request.url.path if request is not None else None,
        "code": code,
        **extra,
    }
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def _status_of(exc: e.AgentSessionError) -> tuple[int, str]:
    for cls, status, title in STATUS_BY_ERROR:
        if isinstance(exc, cls):
            return status, title
    return 400, "Bad request"


def _headers_of(exc: e.AgentSessionError, status: int) -> dict[str, str] | None:
    if status == 401:
        return {"WWW-Authenticate": "Bearer"}
    if status in (429, 503):
        return {"Retry-After": str(exc.extra.get("retry_after", 1))}
    return None


def problem_body(exc: BaseException, instance: str | None) -> dict[str, Any]:
    """The problem document for `exc`, for places that cannot answer with a response (a
    stream that has already started sends it as its final frame)."""
    extra: dict[str, Any] = {}
    if not isinstance(exc, e.AgentSessionError) and _outages(exc):
        log.warning("stream failed: database unavailable (%s)", type(exc).__name__)
        exc = e.DatabaseUnavailable()
    if isinstance(exc, e.AgentSessionError):
        status, title = _status_of(exc)
        code, detail, extra = exc.code, exc.detail or None, exc.extra
    else:
        log.error("stream failed", exc_info=exc)
        status, code, title = 500, "internal_error", "Internal server error"
        detail = "the server failed to handle this request; it has been logged"
    return {
        "type": PROBLEM_TYPE_BASE + code,
        "title": title,
        "status": status,
        "detail": detail,
        "instance": instance,
        "code": code,
        **extra,
    }


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, e.AgentSessionError)
    status, title = _status_of(exc)
    headers = _headers_of(exc, status)
    return problem_response(
        request,
        status=status,
        code=exc.code,
        title=title,
        detail=exc.detail or None,
        headers=headers,
        **exc.extra,
    )


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    """A 503 for a database outage; any other error of these classes stays a 500.

    Registered for the driver's exception classes (not for Exception), so Starlette handles
    it in its inner exception middleware: the response is sent and the exception ends there.
    A 500 from the outer server-error middleware is re-raised to the server after the
    response, and uvicorn then closes the keep-alive connection -- which an outage, where
    every client retries, must not cause.
    """
    if not _outages(exc):
        raise exc  # to the outer handler: a 500, as for any other unexpected error
    request_id = getattr(request.state, "request_id", None)
    log.warning(
        "database unavailable: %s",
        type(exc).__name__,
        extra={"request_id": request_id},
    )
    return await _domain_error(request, e.DatabaseUnavailable())


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": list(err.get("loc", ())), "msg": err.get("msg", ""), "type": err.get("type", "")}
        for err in exc.errors()
    ]
    if any(err["type"] == "json_invalid" for err in errors):
        return problem_response(
            request,
            status=400,
            code="malformed_json",
            title="Malformed JSON",
            detail="the request body is not valid JSON",
            errors=errors,
        )
    return validation_problem(request, errors)


def validation_problem(
    request: Request | None,
    errors: list[dict[str, Any]],
    detail: str = "the request does not match the schema",
) -> JSONResponse:
    """The 422 of a request outside the schema, with FastAPI's `errors` entries; also for
    a check that answers before FastAPI validates (a repeated query parameter)."""
    return problem_response(
        request,
        status=422,
        code="validation_error",
        title="Invalid request",
        detail=detail,
        errors=errors,
    )


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    headers = getattr(exc, "headers", None)
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": allowed_methods(request)}
    return problem_response(
        request,
        status=exc.status_code,
        code=code,
        title=str(exc.detail),
        detail=str(exc.detail),
        headers=headers,
    )


def allowed_methods(request: Request) -> str:
    """Every method the requested path answers, for a 405's `Allow` header.

    Each method of a path is a route of its own, and the router names only the first route
    whose path matched; a client reading `Allow` must see them all (HEAD and OPTIONS, which
    no route documents, left out).
    """
    methods: set[str] = set()
    for route in request.app.router.routes:
        route_methods = getattr(route, "methods", None)
        if route_methods and route.matches(request.scope)[0] != Match.NONE:
            methods |= set(route_methods)
    return ", ".join(sorted(methods - {"HEAD", "OPTIONS"}))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # This handler runs outside the access middleware, so it takes the request id from the
    # request state the middleware left, and returns it itself.
    request_id = getattr(request.state, "request_id", None)
    log.error("unhandled error", exc_info=exc, extra={"request_id": request_id})
    return problem_response(
        request,
        status=500,
        code="internal_error",
        title="Internal server error",
        detail="the server failed to handle this request; it has been logged",
        headers={"X-Request-ID": request_id} if request_id else None,
    )


def install_problem_handlers(app: FastAPI, *, outages: e.OutageSignature | None = None) -> None:
    """The handlers; `outages` says how the store's outages look (answered 503)."""
    global _outages
    if outages is not None:
        _outages = outages
    app.add_exception_handler(e.AgentSessionError, _domain_error)
    for outage_type in _outages.types:
        app.add_exception_handler(outage_type, _database_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


# Any route may answer these: malformed JSON or bad parameters, a missing key, a body over
# the cap (only routes with a body get one, but documenting it everywhere is harmless), and
# a database outage (503; even authentication reads the database).
ALWAYS = (400, 401, 413, 422, 503)


def problem_responses(*statuses: int, always: bool = True) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries for the problem statuses a route can answer (with
    `always`, also those any authenticated route with parameters can answer)."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in sorted({*statuses, *(ALWAYS if always else ())}):
        out[status] = {
            "model": Problem,
            "description": _DESCRIPTIONS.get(status, "Problem"),
            "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
    return out


_DESCRIPTIONS = {
    400: "Malformed request",
    401: "Missing or invalid API key",
    404: "No such session for this tenant",
    409: "Conflict with the session's current state",
    412: "If-Match does not name the current version",
    413: "Request body too large",
    422: "Invalid request",
    429: "A per-tenant limit was reached (open streams, sessions, runs); see Retry-After",
    502: "The model or summarizer failed",
    503: "The database is unavailable; see Retry-After",
}
