"""`Observer`: what the runtime and the store report for metrics, without knowing Prometheus.

The runtime imports neither FastAPI nor a metrics library; it calls these methods on the
observer it was given (`NullObserver` by default). `app.metrics.Metrics` implements the
protocol with prometheus-client. Every argument is a bounded value (an event type, a stop
reason, a provider name): never a tenant, session or run id, so a label can never grow
without bound or carry a secret.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol


class Observer(Protocol):
    def events_appended(self, types: Sequence[str]) -> None:
        """Events committed to the ledger (called after the commit, once per transaction)."""

    def run_finished(self, *, stop_reason: str, seconds: float) -> None:
        """A run ended with `stop_reason` (docs/reference/runs.md) after `seconds` of wall time."""

    def model_call(
        self,
        *,
        provider: str,
        seconds: float,
        input_tokens: int = 0,
        output_tokens: int = 0,
        ok: bool = True,
    ) -> None:
        """One model call: its latency, the tokens it used, and whether it succeeded."""

    def sse_streams_changed(self, delta: int) -> None:
        """An SSE stream opened (+1) or closed (-1)."""

    def bus_reconnected(self) -> None:
        """The event bus lost its listener connection and made a new one."""

    def lease_expired(self) -> None:
        """A run's lease expired and the sweeper marked it interrupted."""

    def webhook_attempted(self, *, outcome: str) -> None:
        """A webhook delivery attempt was settled: delivered, pending (to be retried) or
        failed (given up)."""

    def webhook_delivered(self, *, lag_seconds: float) -> None:
        """A webhook delivery succeeded `lag_seconds` after its event was committed."""

    def schedule_fired(self, *, trigger: str) -> None:
        """A schedule's tick started a run (`trigger`: schedule or manual)."""

    def schedule_skipped(self, *, reason: str, ticks: int = 1) -> None:
        """`ticks` of a schedule started no run: missed, the session busy or gone, ..."""

    def db_read(self, *, target: str, reason: str) -> None:
        """A read that tolerates lag was served by `target` (replica or primary), and why:
        fenced (the replica had applied the caller's fence), behind (it had not),
        unavailable (it failed) or no_replica (none usable)."""

    def retention_applied(
        self, *, sessions_deleted: int, sessions_pruned: int, events_pruned: int
    ) -> None:
        """One retention pass (not a dry run) ended: what this replica deleted and pruned."""


class NullObserver:
    """Reports nowhere: the default for the CLI and for code built without metrics."""

    def events_appended(self, types: Sequence[str]) -> None:
        return None

    def run_finished(self, *, stop_reason: str, seconds: float) -> None:
        return None

    def model_call(
        self,
        *,
        provider: str,
        seconds: float,
        input_tokens: int = 0,
        output_tokens: int = 0,
        ok: bool = True,
    ) -> None:
        return None

    def sse_streams_changed(self, delta: int) -> None:
        return None

    def bus_reconnected(self) -> None:
        return None

    def lease_expired(self) -> None:
        return None

    def webhook_attempted(self, *, outcome: str) -> None:
        return None

    def webhook_delivered(self, *, lag_seconds: float) -> None:
        return None

    def schedule_fired(self, *, trigger: str) -> None:
        return None

    def schedule_skipped(self, *, reason: str, ticks: int = 1) -> None:
        return None

    def db_read(self, *, target: str, reason: str) -> None:
        return None

    def retention_applied(
        self, *, sessions_deleted: int, sessions_pruned: int, events_pruned: int
    ) -> None:
        return None


@contextmanager
def sse_stream(observer: Observer) -> Iterator[None]:
    """Count one open SSE stream for as long as the block runs (the gauge never leaks)."""
    observer.sse_streams_changed(1)
    try:
        yield
    finally:
        observer.sse_streams_changed(-1)
