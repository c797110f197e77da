"""OpenTelemetry tracing: optional (the `otel` extra) and off by default (ASR_OTEL_ENABLED).

Code everywhere calls `span(name, **attributes)`; it goes through the OpenTelemetry API,
which records nothing until `configure_tracing` installed an SDK provider, and is a plain
no-op when the extra is not installed at all. So the runtime and the store stay free of any
tracing dependency, as they are of FastAPI and Prometheus.

What gets a span: every HTTP request (the FastAPI instrumentation, route template as name),
each model call (`model.call`), each server tool execution (`tool.execute`) and each store
write transaction (`store.write`). The event ledger is not a trace: it records what
happened to a session, durably; spans record where time went, for a while. Both exist.
Attributes are bounded and carry no payloads or secrets.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.settings import Settings

try:  # the `otel` extra
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised where the extra is absent
    _trace = None  # type: ignore[assignment]

SERVICE_NAME = "agent-session-runtime"
_UNTRACED = "healthz,readyz,metrics"
# One shared no-op context (reusable): a run's every write asks for a span.
_NO_SPAN = contextlib.nullcontext()
# Set by `configure_tracing`. Before it, the API's proxy would record nothing, at the cost of
# a provider lookup (an environment read), a tracer and a non-recording span per call.
_recording = False


def span(name: str, **attributes: str | int | float | bool) -> AbstractContextManager[Any]:
    """A span around the block (no-op without the extra or before configuration)."""
    if not _recording or _trace is None:
        return _NO_SPAN
    return _trace.get_tracer("app").start_as_current_span(name, attributes=attributes)


class TracingUnavailable(RuntimeError):
    """ASR_OTEL_ENABLED is set but the `otel` extra is not installed."""


def configure_tracing(settings: Settings, app: Any) -> Any:
    """Install an SDK tracer provider (once per process) and instrument the FastAPI app.

    Returns the provider, so a caller (a test) can add its own span processor.
    """
    try:
        from opentelemetry import trace
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as exc:
        raise TracingUnavailable(
            'ASR_OTEL_ENABLED=true needs the otel extra: pip install "agent-session-runtime[otel]"'
        ) from exc
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        # Resource.create also reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
        provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
        if settings.otel_exporter == "otlp":
            # Endpoint, headers and timeout come from the standard OTEL_EXPORTER_OTLP_* env.
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif settings.otel_exporter == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        trace.set_tracer_provider(provider)
    global _recording
    _recording = True
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=provider, excluded_urls=_UNTRACED, exclude_spans=["receive", "send"]
    )
    return provider
