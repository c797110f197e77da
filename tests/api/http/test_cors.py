"""CORS (issue #18): a browser app on another origin may call every route, streams included,
when its origin is listed in ASR_CORS_ORIGINS; no other origin gets an Access-Control-* header,
and with the setting empty nothing changes (a preflight is a 405, as before)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import ValidationError

from app.main import create_app
from app.settings import Settings
from tests.conftest import TenantKey

FRONTEND = "http://localhost:5173"
OTHER = "http://127.0.0.1:9999"


@pytest.fixture(scope="module")
async def cors_app(settings: Settings) -> AsyncIterator[object]:
    application = create_app(
        settings.model_copy(update={"cors_origins": f"{FRONTEND}, https://app.example.com"})
    )
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def browser(cors_app: object) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=cors_app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://asr.test") as c:
        yield c


def preflight(method: str, headers: str, origin: str = FRONTEND) -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": headers,
    }


@pytest.mark.parametrize(
    ("path", "method", "asked"),
    [
        ("/v1/sessions", "POST", "authorization,content-type,idempotency-key"),
        ("/v1/sessions/s1", "PATCH", "authorization,content-type"),
        ("/v1/sessions/s1", "DELETE", "authorization"),
        ("/v1/sessions/s1/save", "POST", "authorization,if-match"),
        ("/v1/sessions/s1/runs", "POST", "authorization,content-type,accept"),
        ("/v1/sessions/s1/events/stream", "GET", "authorization,last-event-id"),
        ("/v1/events/stream", "GET", "last-event-id"),
        ("/v1/stream-tokens", "POST", "authorization,content-type"),
    ],
)
async def test_preflight_is_answered_on_every_kind_of_route(
    browser: httpx.AsyncClient, path: str, method: str, asked: str
) -> None:
    response = await browser.options(path, headers=preflight(method, asked))
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == FRONTEND
    assert method in response.headers["access-control-allow-methods"]
    allowed = response.headers["access-control-allow-headers"].lower()
    for header in asked.split(","):
        assert header in allowed
    assert "access-control-allow-credentials" not in response.headers


async def test_an_unlisted_origin_gets_no_cors_headers(browser: httpx.AsyncClient) -> None:
    response = await browser.options("/v1/sessions", headers=preflight("POST", "", OTHER))
    assert response.status_code == 400
    assert "access-control-allow-origin" not in response.headers
    plain = await browser.get("/healthz", headers={"Origin": OTHER})
    assert plain.status_code == 200
    assert "access-control-allow-origin" not in plain.headers


async def test_answers_expose_the_headers_a_frontend_reads(
    browser: httpx.AsyncClient, tenant: TenantKey
) -> None:
    headers = {"Origin": FRONTEND, **tenant.headers, "Idempotency-Key": "cors-1"}
    created = await browser.post("/v1/sessions", json={}, headers=headers)
    assert created.status_code == 201
    assert created.headers["access-control-allow-origin"] == FRONTEND
    exposed = created.headers["access-control-expose-headers"].lower()
    for name in ("location", "etag", "retry-after", "idempotent-replayed", "x-request-id"):
        assert name in exposed
    replay = await browser.post("/v1/sessions", json={}, headers=headers)
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.headers["access-control-allow-origin"] == FRONTEND


async def test_problem_answers_carry_cors_headers_too(browser: httpx.AsyncClient) -> None:
    """A browser cannot read a 401 or a 413 without them, and would see a network error."""
    unauthorized = await browser.get("/v1/sessions", headers={"Origin": FRONTEND})
    assert unauthorized.status_code == 401
    assert unauthorized.headers["access-control-allow-origin"] == FRONTEND
    too_large = await browser.post(
        "/v1/sessions",
        content=b"{" + b" " * 2_000_000 + b"}",
        headers={"Origin": FRONTEND, "Content-Type": "application/json"},
    )
    assert too_large.status_code == 413
    assert too_large.headers["access-control-allow-origin"] == FRONTEND


async def test_without_origins_nothing_changes(anon: httpx.AsyncClient) -> None:
    response = await anon.options("/v1/sessions", headers=preflight("POST", "authorization"))
    assert response.status_code == 405
    assert "access-control-allow-origin" not in response.headers


@pytest.mark.parametrize(
    "value", ["*", "localhost:5173", "http://localhost:5173/", "ftp://x", "http://a/b"]
)
def test_only_exact_origins_are_accepted(value: str) -> None:
    with pytest.raises(ValidationError):
        Settings(cors_origins=value)


async def test_a_page_that_sends_trace_context_passes_its_preflight(
    browser: httpx.AsyncClient,
) -> None:
    """W3C Trace Context headers are in the default list: an instrumented frontend's
    preflight is answered, and asks for nothing the service refuses."""
    asked = "authorization,content-type,traceparent,tracestate"
    answer = await browser.options("/v1/sessions", headers=preflight("POST", asked))
    assert answer.status_code == 200
    allowed = answer.headers["access-control-allow-headers"].lower()
    assert {"traceparent", "tracestate"} <= {h.strip() for h in allowed.split(",")}


async def test_the_allowed_request_headers_are_configurable(settings: Settings) -> None:
    application = create_app(
        settings.model_copy(
            update={"cors_origins": FRONTEND, "cors_allow_headers": "Authorization,X-Custom"}
        )
    )
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://asr.test") as c:
        ok = await c.options("/v1/sessions", headers=preflight("POST", "authorization,x-custom"))
        refused = await c.options("/v1/sessions", headers=preflight("POST", "traceparent"))
    assert ok.status_code == 200
    assert refused.status_code == 400


def test_a_wildcard_is_not_a_header_name() -> None:
    with pytest.raises(ValidationError):
        Settings(cors_allow_headers="Authorization,*")
