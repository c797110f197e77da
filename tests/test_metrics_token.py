"""`ASR_METRICS_TOKEN`: `/metrics` behind a bearer token, for a scraper; the rest unchanged."""

from __future__ import annotations

import httpx
from pydantic import SecretStr

from app.main import create_app
from app.settings import Settings

TOKEN = "scrape-me-3f9c2a"


async def test_metrics_need_the_token_when_one_is_set(settings: Settings) -> None:
    guarded = settings.model_copy(update={"metrics_token": SecretStr(TOKEN)})
    app = create_app(guarded)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://asr.test") as c:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                refused = await c.get("/metrics", headers=headers)
                assert refused.status_code == 401, headers
                assert refused.headers["www-authenticate"] == "Bearer"
                assert refused.json()["code"] == "unauthorized"
                assert TOKEN not in refused.text
            scraped = await c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            assert scraped.status_code == 200
            assert "asr_http_requests_total" in scraped.text
            # Only /metrics: health needs no token, nor does any other route's own auth change.
            assert (await c.get("/healthz")).status_code == 200
            assert (await c.get("/v1/sessions")).status_code == 401


async def test_metrics_are_open_without_a_token(anon: httpx.AsyncClient) -> None:
    assert (await anon.get("/metrics")).status_code == 200
