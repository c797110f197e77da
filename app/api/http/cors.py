"""Cross-origin access for browser frontends on other origins (`ASR_CORS_ORIGINS`).

Starlette's CORS middleware answers every preflight (`OPTIONS` with
`Access-Control-Request-Method`) before routing, so each route -- the SSE streams included --
can be called from an allowed origin; any other origin gets no `Access-Control-*` header and
the browser refuses it. Credentials (cookies) are never allowed: the API authenticates with a
bearer key in `Authorization`, and browsers' EventSource uses a stream token in `?token=`, so
neither needs them.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

# Response headers a frontend must be able to read: where a created thing is, the version to
# send back in If-Match, when to retry, whether an answer is a replay, and the request id.
EXPOSED_HEADERS = ("Location", "ETag", "Retry-After", "Idempotent-Replayed", "X-Request-ID")
ALLOWED_METHODS = ("GET", "POST", "PATCH", "DELETE")
# Browsers cap this anyway (Chromium at 2 h); a day saves a preflight per request elsewhere.
PREFLIGHT_MAX_AGE_SECONDS = 86_400


def install_cors(app: FastAPI, origins: list[str], *, headers: list[str]) -> None:
    """Allow exactly `origins`, sending `headers` (what a frontend sends besides the
    CORS-safelisted ones, `ASR_CORS_ALLOW_HEADERS`); with no origin, add nothing."""
    if not origins:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=origins,
        allow_methods=ALLOWED_METHODS,
        allow_headers=headers,
        expose_headers=EXPOSED_HEADERS,
        allow_credentials=False,
        max_age=PREFLIGHT_MAX_AGE_SECONDS,
    )
