"""What every benchmark shares: sizes, the event shape, timing, temporary databases."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from app.runtime.session.events import EventType, NewEvent

EVENT_TYPE = EventType.STEP_END  # folded as a no-op: state size stays flat as ledgers grow
TEXT = "The quick brown fox jumps over the lazy dog. " * 10


def payload(i: int) -> dict[str, Any]:
    """An event payload of about 560 bytes of JSON."""
    return {
        "turn": i,
        "text": TEXT[:440],
        "usage": {"input_tokens": 812, "output_tokens": 64, "total_tokens": 876},
        "model": "scripted",
        "finish_reason": "stop",
    }


PAYLOAD_BYTES = len(json.dumps(payload(1000), separators=(",", ":")))


def new_event(i: int) -> NewEvent:
    return NewEvent(EVENT_TYPE, payload(i), "run_bench", f"turn_{i}")


@dataclass(frozen=True)
class Sizes:
    """Every count the suite uses; `quick()` shrinks them so the whole suite is a smoke test."""

    repeats: int = 3
    seq_events: int = 2000
    conc_sessions: int = 64
    conc_events: int = 200
    conc_writers: int = 16
    batch_size: int = 8
    batch_count: int = 250
    load_sizes: tuple[int, ...] = (2_000, 20_000, 100_000)
    small_session: int = 100
    tail: int = 99
    fork_size: int = 20_000
    http_clients: int = 32
    http_seconds: float = 5.0
    http_warmup_seconds: float = 2.0
    http_preload_events: int = 1000
    sse_subscribers: int = 500
    sse_events: int = 200
    cancel_runs: int = 60
    delta_subscribers: int = 50
    delta_runs: int = 20
    scale_events: int = 1_000_000
    scale_sessions: int = 10_000
    tenant_sessions: int = 10_000
    # (model latency in ms, runs in flight) for wait mode; (deltas, pace in ms, runs in
    # flight) for stream mode; the measured window (at least 3 model latencies).
    inflight_wait: tuple[tuple[int, int], ...] = ((1000, 100), (1000, 300), (10000, 100),
                                                  (10000, 300))  # fmt: skip
    inflight_stream: tuple[tuple[int, int, int], ...] = ((200, 20, 25), (200, 20, 100))
    inflight_seconds: float = 15.0
    prune_events: int = 100_000

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            repeats=1,
            seq_events=50,
            conc_sessions=4,
            conc_events=10,
            conc_writers=4,
            batch_count=10,
            load_sizes=(300, 1_000),
            small_session=100,
            tail=20,
            fork_size=1_000,
            http_clients=4,
            http_seconds=1.0,
            http_warmup_seconds=0.3,
            http_preload_events=100,
            sse_subscribers=5,
            sse_events=10,
            cancel_runs=5,
            delta_subscribers=4,
            delta_runs=2,
            scale_events=20_000,
            scale_sessions=200,
            tenant_sessions=200,
            inflight_wait=((200, 8),),
            inflight_stream=((10, 10, 4),),
            inflight_seconds=1.0,
            prune_events=2_000,
        )


@dataclass
class Figure:
    """One measured operation next to its raw baseline from the same run.

    `value` and `baseline` are medians over the repetitions; `higher_is_better` says which
    way the ratio reads (throughputs: value / baseline; times: baseline / value is *not*
    used, the ratio is always value / baseline and `unit` says what it counts).
    """

    name: str
    unit: str
    value: float
    baseline: float | None
    baseline_label: str
    higher_is_better: bool
    samples: list[float] = field(default_factory=list)
    baseline_samples: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0):
            return None
        return self.value / self.baseline

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "value": round(self.value, 4),
            "baseline": None if self.baseline is None else round(self.baseline, 4),
            "baseline_label": self.baseline_label,
            "ratio": None if self.ratio is None else round(self.ratio, 3),
            "higher_is_better": self.higher_is_better,
            "samples": [round(s, 4) for s in self.samples],
            "baseline_samples": [round(s, 4) for s in self.baseline_samples],
            **({"extra": self.extra} if self.extra else {}),
        }


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    """Seconds one call of `fn` takes (wall clock)."""
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


async def interleaved(
    repeats: int, a: Callable[[], Awaitable[float]], b: Callable[[], Awaitable[float]]
) -> tuple[list[float], list[float]]:
    """Alternate the measured and the raw run, so that load drifts hit both alike."""
    xs, ys = [], []
    for _ in range(repeats):
        xs.append(await a())
        ys.append(await b())
    return xs, ys


async def per_call_ms(fn: Callable[[], Awaitable[Any]], *, calls: int) -> float:
    """Median milliseconds per call over `calls` calls (after one warm-up call)."""
    await fn()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - started) * 1000)
    return median(times)


# ------------------------------------------------------------------ databases


PG_DEFAULT = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"


def pg_base_url() -> str:
    return os.environ.get("ASR_BENCH_PG_URL") or os.environ.get("PG_URL") or PG_DEFAULT


def asyncpg_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _pg_admin(base: str, sql: str) -> None:
    import asyncpg

    admin = make_url(base).set(drivername="postgresql", database="postgres")
    conn = await asyncpg.connect(admin.render_as_string(hide_password=False), timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def create_database(backend: str, workdir: Path) -> str:
    """A fresh empty database: a file on SQLite, a new database on the PostgreSQL server."""
    if backend == "sqlite":
        return f"sqlite+aiosqlite:///{workdir / 'bench.db'}"
    base = pg_base_url()
    name = f"asr_bench_{os.getpid()}_{secrets.token_hex(3)}"
    await _pg_admin(base, f'CREATE DATABASE "{name}"')
    return make_url(base).set(database=name).render_as_string(hide_password=False)


async def drop_database(url: str) -> None:
    if url.startswith("postgresql"):
        name = make_url(url).database
        await _pg_admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def migrate(url: str) -> None:
    from app.store.migrations import upgrade_head

    await asyncio.to_thread(upgrade_head, url)


def sqlite_path(url: str) -> str:
    return make_url(url).database or ""
