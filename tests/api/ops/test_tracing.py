"""OpenTelemetry (the optional `otel` extra, off by default): spans for HTTP, model calls,
tools and store writes, with bounded attributes and no payloads."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.conftest import TenantKey

sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
trace = pytest.importorskip("opentelemetry.trace")


class Collect(sdk.SpanProcessor):  # type: ignore[misc]
    """Keeps finished spans while the test runs (the global provider outlives it)."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.active = True

    def on_end(self, span: Any) -> None:
        if self.active:
            self.spans.append(span)


async def test_spans_cover_http_model_tools_and_store_writes(
    settings: Settings, tenant: TenantKey
) -> None:
    application = create_app(
        settings.model_copy(update={"otel_enabled": True, "otel_exporter": "none"})
    )
    collect = Collect()
    # configure_tracing installed the process's provider (the global one) for this app.
    trace.get_tracer_provider().add_span_processor(collect)  # type: ignore[attr-defined]
    try:
        async with application.router.lifespan_context(application):
            transport = httpx.ASGITransport(app=application)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://asr.test", headers=tenant.headers
            ) as c:
                sid = (await c.post("/v1/sessions", json={})).json()["session_id"]
                text = '[tool:echo {"text": "a secret word"}]'
                run = await c.post(f"/v1/sessions/{sid}/runs", json={"input": text})
                assert run.json()["stop_reason"] == "COMPLETED", run.text
                assert (await c.get("/healthz")).status_code == 200
    finally:
        collect.active = False
    names = [s.name for s in collect.spans]
    assert "POST /v1/sessions/{session_id}/runs" in names
    assert "POST /v1/sessions" in names
    assert names.count("model.call") == 2  # the tool call, then the answer
    assert [s.attributes["tool"] for s in collect.spans if s.name == "tool.execute"] == ["echo"]
    assert "store.write" in names
    assert not any("healthz" in n for n in names)
    for recorded in collect.spans:
        for value in (recorded.attributes or {}).values():
            assert "secret word" not in str(value) and tenant.key not in str(value)


def test_tracing_is_off_by_default() -> None:
    assert Settings().otel_enabled is False
