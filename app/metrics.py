"""Prometheus metrics: every metric object of the service, defined here and nowhere else.

`Metrics` owns a registry of its own (not prometheus-client's global one), so several apps
in one process, as in the tests, never share or clash over series. It implements the
runtime's `Observer` protocol, which is how the store and the runtime report without
importing prometheus-client.

Labels are bounded by construction: HTTP requests carry the route *template*
(`/v1/sessions/{session_id}`), never the raw path; event types and stop reasons outside the
known vocabulary collapse to `other`; no label ever holds a tenant, session, run or key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from app.runtime.runs.loop import StopReason
from app.runtime.session.events import EventType

# The loop's stop reasons, plus FAILED for a run that ended in an error (no stop reason).
STOP_REASONS = frozenset(r.value for r in StopReason) | {"FAILED"}
# Model calls are labelled by profile kind (a bounded set), never by profile name.
PROVIDERS = frozenset({"scripted", "openai", "anthropic", "gemini"})
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
EVENT_TYPES = frozenset(t.value for t in EventType)
WEBHOOK_OUTCOMES = frozenset({"delivered", "pending", "failed"})
# Why a schedule's tick started no run (schedule_fires.reason; anything else is `other`).
SKIP_REASONS = frozenset(
    {
        "missed",
        "run_in_progress",
        "session_not_found",
        "rate_limited",
        "too_many_runs",
        "tool_calls_pending",
    }
)
TRIGGERS = frozenset({"schedule", "manual"})
READ_TARGETS = frozenset({"replica", "primary"})
READ_REASONS = frozenset({"fenced", "behind", "unavailable", "no_replica"})
UNMATCHED_ROUTE = "unmatched"
OTHER = "other"

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

CONTENT_TYPE = CONTENT_TYPE_LATEST


def _bounded(value: str, known: frozenset[str]) -> str:
    return value if value in known else OTHER


class Metrics:
    """The service's metrics and the `Observer` that feeds them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        r = self.registry
        self.http_requests = Counter(
            "asr_http_requests",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_latency = Histogram(
            "asr_http_request_duration_seconds",
            "Time to answer an HTTP request (whole stream for SSE and NDJSON).",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.events_appended_total = Counter(
            "asr_events_appended", "Events committed to the ledger, by type.", ["type"], registry=r
        )
        self.runs = Counter(
            "asr_runs_finished", "Runs that ended, by stop reason.", ["stop_reason"], registry=r
        )
        self.run_latency = Histogram(
            "asr_run_duration_seconds",
            "Wall time of a run, by stop reason.",
            ["stop_reason"],
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        self.model_calls = Counter(
            "asr_model_calls",
            "Model calls, by provider and outcome.",
            ["provider", "outcome"],
            registry=r,
        )
        self.model_latency = Histogram(
            "asr_model_call_duration_seconds",
            "Latency of one model call, by provider.",
            ["provider"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "asr_model_tokens",
            "Tokens used by model calls, by provider and direction.",
            ["provider", "direction"],
            registry=r,
        )
        self.sse_streams = Gauge(
            "asr_sse_streams_active", "SSE streams open right now in this process.", registry=r
        )
        self.bus_reconnects = Counter(
            "asr_bus_reconnects", "Times the event bus re-established its listener.", registry=r
        )
        self.lease_expiries = Counter(
            "asr_lease_expiries", "Run leases that expired and were swept.", registry=r
        )
        self.webhook_attempts = Counter(
            "asr_webhook_delivery_attempts",
            "Webhook delivery attempts settled by this process, by outcome: delivered,"
            " pending (failed, to be retried) or failed (retries exhausted).",
            ["outcome"],
            registry=r,
        )
        self.webhook_failures = Counter(
            "asr_webhook_deliveries_failed",
            "Webhook deliveries given up after their retry window (the subscription is disabled).",
            registry=r,
        )
        self.webhook_lag = Histogram(
            "asr_webhook_delivery_lag_seconds",
            "From an event's commit to its successful webhook delivery.",
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        self.db_reads = Counter(
            "asr_db_reads",
            "Reads that tolerate lag (event pages, catch-up, exports, lists), by where they"
            " were served (replica, primary) and why: fenced (the replica had applied the"
            " caller's fence), behind, unavailable, no_replica.",
            ["target", "reason"],
            registry=r,
        )
        self.replica_up = Gauge(
            "asr_db_replica_up",
            "Whether a read replica (by its position in ASR_DATABASE_READ_URLS) is in use.",
            ["replica"],
            registry=r,
        )
        self.replica_lag_bytes = Gauge(
            "asr_db_replica_lag_bytes",
            "WAL a read replica has yet to apply, at its last probe (-1: unknown).",
            ["replica"],
            registry=r,
        )
        self.replica_lag_seconds = Gauge(
            "asr_db_replica_lag_seconds",
            "Seconds since the last transaction a lagging read replica applied, at its last"
            " probe (0 when caught up, -1 unknown).",
            ["replica"],
            registry=r,
        )
        # Set by the app when it has read replicas: their state, read at each scrape.
        self.replica_stats: Callable[[], list[dict[str, Any]]] | None = None
        self.schedule_fires = Counter(
            "asr_schedule_fires",
            "Schedule ticks that started a run, by trigger (schedule or manual).",
            ["trigger"],
            registry=r,
        )
        self.schedule_skips = Counter(
            "asr_schedule_skips",
            "Schedule ticks that started no run, by reason (missed, run_in_progress, ...).",
            ["reason"],
            registry=r,
        )

        self.retention_passes = Counter(
            "asr_retention_passes", "Retention passes this replica completed.", registry=r
        )
        self.retention_sessions_deleted = Counter(
            "asr_retention_sessions_deleted",
            "Sessions this replica's retention passes deleted (expired or idle).",
            registry=r,
        )
        self.retention_sessions_pruned = Counter(
            "asr_retention_sessions_pruned",
            "Sessions whose ledger this replica's retention passes pruned.",
            registry=r,
        )
        self.retention_events_pruned = Counter(
            "asr_retention_events_pruned",
            "Ledger events this replica's retention passes pruned (replaced by markers).",
            registry=r,
        )

    # ---------------------------------------------------------------- Observer

    def events_appended(self, types: Sequence[str]) -> None:
        for event_type in types:
            self.events_appended_total.labels(type=_bounded(event_type, EVENT_TYPES)).inc()

    def run_finished(self, *, stop_reason: str, seconds: float) -> None:
        reason = _bounded(stop_reason, STOP_REASONS)
        self.runs.labels(stop_reason=reason).inc()
        self.run_latency.labels(stop_reason=reason).observe(max(seconds, 0.0))

    def model_call(
        self,
        *,
        provider: str,
        seconds: float,
        input_tokens: int = 0,
        output_tokens: int = 0,
        ok: bool = True,
    ) -> None:
        name = _bounded(provider, PROVIDERS)
        self.model_calls.labels(provider=name, outcome="ok" if ok else "error").inc()
        self.model_latency.labels(provider=name).observe(max(seconds, 0.0))
        if input_tokens > 0:
            self.tokens.labels(provider=name, direction="input").inc(input_tokens)
        if output_tokens > 0:
            self.tokens.labels(provider=name, direction="output").inc(output_tokens)

    def sse_streams_changed(self, delta: int) -> None:
        self.sse_streams.inc(delta)

    def bus_reconnected(self) -> None:
        self.bus_reconnects.inc()

    def lease_expired(self) -> None:
        self.lease_expiries.inc()

    def webhook_attempted(self, *, outcome: str) -> None:
        self.webhook_attempts.labels(outcome=_bounded(outcome, WEBHOOK_OUTCOMES)).inc()
        if outcome == "failed":
            self.webhook_failures.inc()

    def webhook_delivered(self, *, lag_seconds: float) -> None:
        self.webhook_lag.observe(max(lag_seconds, 0.0))

    def schedule_fired(self, *, trigger: str) -> None:
        self.schedule_fires.labels(trigger=_bounded(trigger, TRIGGERS)).inc()

    def schedule_skipped(self, *, reason: str, ticks: int = 1) -> None:
        self.schedule_skips.labels(reason=_bounded(reason, SKIP_REASONS)).inc(max(ticks, 0))

    def db_read(self, *, target: str, reason: str) -> None:
        self.db_reads.labels(
            target=_bounded(target, READ_TARGETS), reason=_bounded(reason, READ_REASONS)
        ).inc()

    def retention_applied(
        self, *, sessions_deleted: int, sessions_pruned: int, events_pruned: int
    ) -> None:
        self.retention_passes.inc()
        self.retention_sessions_deleted.inc(sessions_deleted)
        self.retention_sessions_pruned.inc(sessions_pruned)
        self.retention_events_pruned.inc(events_pruned)

    # -------------------------------------------------------------------- HTTP

    def observe_http(self, *, method: str, route: str, status: int, seconds: float) -> None:
        """One answered request; `route` must already be a template (or `unmatched`)."""
        verb = _bounded(method, METHODS)
        self.http_requests.labels(method=verb, route=route, status=str(status)).inc()
        self.http_latency.labels(method=verb, route=route).observe(max(seconds, 0.0))

    def render(self) -> bytes:
        """The exposition in Prometheus text format."""
        if self.replica_stats is not None:
            for stat in self.replica_stats():
                label = str(stat["replica"])
                self.replica_up.labels(replica=label).set(1 if stat["up"] else 0)
                lag_bytes, lag_seconds = stat["lag_bytes"], stat["lag_seconds"]
                self.replica_lag_bytes.labels(replica=label).set(
                    -1 if lag_bytes is None else lag_bytes
                )
                self.replica_lag_seconds.labels(replica=label).set(
                    -1 if lag_seconds is None else lag_seconds
                )
        return generate_latest(self.registry)
