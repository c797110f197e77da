"""The optional guard of `/metrics`: a bearer token of its own (`ASR_METRICS_TOKEN`).

Prometheus sends it with `authorization: {type: Bearer, credentials: <token>}` in its scrape
config. Without the setting `/metrics` is open, as Prometheus exporters usually are; put it
behind the token, or keep the port off the public network, when scrapers are not the only
ones who can reach it.
"""

from __future__ import annotations

import hmac

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.http.problems import problem_response


class MetricsTokenMiddleware:
    """`/metrics` only for `Authorization: Bearer <ASR_METRICS_TOKEN>` (401 otherwise).

    The route itself takes no API key (a scraper is no tenant); this guard sits in front of
    it when the operator sets a token. The comparison takes the same time however much of
    the token a caller got right."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/metrics":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        response = problem_response(
            Request(scope),
            status=401,
            code="unauthorized",
            title="Unauthorized",
            detail="missing or invalid metrics token (ASR_METRICS_TOKEN)",
            headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)
