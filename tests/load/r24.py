"""R24: a bounded loopback load on two replicas sharing one database.

    python -m tests.load.r24 --database-url postgresql+asyncpg://postgres@127.0.0.1/asr_r24 \\
        --seconds 300

Starts two `asr serve` replicas on 127.0.0.1 and keeps `--sessions` workers busy until the
time is up. Each worker, in a loop: creates a session on one replica, subscribes to its
timeline over SSE on the other, makes `--appends` appends (alternating replicas, with a
random think time around `--think-ms`), one scripted run in wait mode, then audits the
session: the ledger is gapless, every append is in it exactly once, and the subscriber
received exactly seqs 1..N. Requests in flight are capped (`--in-flight`, default 100 with
the subscribers) so the harness does not starve the servers of the 2 cores they share.

Measured, and judged against R24: 5xx count; lost or duplicated events; p95 append
latency (< 150 ms); p95 commit-to-SSE latency, from the event's `created_at` (stamped in its
write transaction just before the commit) to the subscriber's socket (< 500 ms); the
replicas' RSS growth over the last two minutes (< 10%); the peak of server connections to
the database (<= pool x replicas + listeners); the peak of `pg_notification_queue_usage()`
(< 0.01, R11). Prints one JSON document; exits 1 when a check fails. Loopback only; every
loop is bounded by the deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from sqlalchemy.engine import make_url

from app.runtime.access.accounts import Accounts
from app.settings import Settings
from app.store.engine import make_engine
from app.store.stores import open_stores
from tests.conftest import Server, start_server, stop_server

POOL_SIZE, MAX_OVERFLOW = 5, 5
REPLICA_ENV = {
    "ASR_DB_POOL_SIZE": str(POOL_SIZE),
    "ASR_DB_MAX_OVERFLOW": str(MAX_OVERFLOW),
    "ASR_MAX_RUNS_PER_MINUTE": "100000",
    "ASR_MAX_LIVE_RUNS_PER_TENANT": "1000",
    "ASR_SSE_MAX_STREAMS_PER_TENANT": "1000",
    "ASR_LOG_LEVEL": "warning",
}


@dataclass
class Figures:
    statuses: dict[int, int] = field(default_factory=dict)
    append_ms: list[float] = field(default_factory=list)
    sse_ms: list[float] = field(default_factory=list)
    sessions: int = 0
    events: int = 0
    problems: list[str] = field(default_factory=list)
    rss_kb: list[tuple[float, int]] = field(default_factory=list)  # (t, both replicas)
    peak_connections: int = 0  # above the baseline taken before the replicas start
    baseline_connections: int = 0
    retries: int = 0
    peak_notify_queue: float = 0.0

    def status(self, code: int) -> None:
        self.statuses[code] = self.statuses.get(code, 0) + 1

    def problem(self, text: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(text)


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def subscribe(
    http: httpx.AsyncClient, sid: str, figures: Figures, received: list[int], done: asyncio.Event
) -> None:
    """Follow the session's timeline until `done`; note each id and its latency."""
    async with http.stream("GET", f"/v1/sessions/{sid}/events/stream") as response:
        figures.status(response.status_code)
        if response.status_code != 200:
            figures.problem(f"{sid}: stream answered {response.status_code}")
            return
        frame: dict[str, str] = {}
        async for line in response.aiter_lines():
            if line:
                name, _, value = line.partition(":")
                frame[name] = value.removeprefix(" ")
                continue
            if "id" in frame and "data" in frame:
                now = datetime.now(UTC)
                event = json.loads(frame["data"])
                received.append(int(frame["id"]))
                created = datetime.fromisoformat(event["created_at"])
                figures.sse_ms.append((now - created).total_seconds() * 1000)
            frame = {}
            if done.is_set():
                return


async def worker(
    n: int,
    clients: list[httpx.AsyncClient],
    streams: list[httpx.AsyncClient],
    gate: asyncio.Semaphore,
    figures: Figures,
    args: argparse.Namespace,
    deadline: float,
) -> None:
    rng = random.Random(n)

    async def call(replica: int, method: str, path: str, **kw: Any) -> httpx.Response:
        # Every write carries an Idempotency-Key, so a request whose connection broke (a
        # keep-alive connection the server closed as it was reused) is sent again safely,
        # as a real client would; such retries are counted.
        headers = {"Idempotency-Key": uuid.uuid4().hex} if method == "POST" else {}
        for attempt in range(3):
            try:
                async with gate:
                    response = await clients[replica % 2].request(
                        method, path, headers=headers, **kw
                    )
                break
            except httpx.TransportError:
                figures.retries += 1
                if attempt == 2:
                    raise
        figures.status(response.status_code)
        return response

    round_ = 0
    # Every worker does one round; more while there is time left to finish another.
    while round_ == 0 or time.monotonic() < deadline - args.round_seconds:
        round_ += 1
        created = await call(n, "POST", "/v1/sessions", json={"metadata": {"w": str(n)}})
        if created.status_code != 201:
            figures.problem(f"create answered {created.status_code}")
            await asyncio.sleep(1)
            continue
        sid = created.json()["session_id"]
        received: list[int] = []
        done = asyncio.Event()
        follower = asyncio.create_task(
            subscribe(streams[(n + 1) % 2], sid, figures, received, done)
        )
        contents = []
        for k in range(args.appends):
            await asyncio.sleep(rng.uniform(0, 2 * args.think_ms / 1000))
            text = f"w{n}-r{round_}-{k}"
            contents.append(text)
            item = {"type": "message", "role": "user", "content": text}
            started = time.perf_counter()
            r = await call(n + k, "POST", f"/v1/sessions/{sid}/items", json={"items": [item]})
            figures.append_ms.append((time.perf_counter() - started) * 1000)
            if r.status_code != 201:
                figures.problem(f"{sid}: append answered {r.status_code}: {r.text[:200]}")
        run = await call(
            n, "POST", f"/v1/sessions/{sid}/runs", json={"input": "[words:20]", "mode": "wait"}
        )
        if run.status_code != 200:
            figures.problem(f"{sid}: run answered {run.status_code}: {run.text[:200]}")
        await audit(n, sid, call, contents, received, figures)
        done.set()
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)


async def audit(
    n: int,
    sid: str,
    call: Callable[..., Any],
    contents: list[str],
    received: list[int],
    figures: Figures,
) -> None:
    page = await call(n, "GET", f"/v1/sessions/{sid}/events", params={"limit": 1000})
    events = page.json()["data"]
    seqs = [e["seq"] for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        figures.problem(f"{sid}: ledger not gapless")
    stored = [
        e["payload"]["items"][0]["content"]
        for e in events
        if e["type"] == "MEMORY_ITEMS_APPENDED" and e["payload"]["items"][0]["role"] == "user"
    ]
    if sorted(stored) != sorted(contents):
        figures.problem(f"{sid}: appends lost or duplicated")
    for _ in range(100):  # up to 10 s for the subscriber to catch up
        if len(received) >= len(seqs):
            break
        await asyncio.sleep(0.1)
    if received != seqs:
        figures.problem(f"{sid}: subscriber got {len(received)} of {len(seqs)} events in order")
    figures.sessions += 1
    figures.events += len(seqs)


async def sample(
    servers: list[Server], admin_dsn: str | None, figures: Figures, stop: asyncio.Event
) -> None:
    conn = await asyncpg.connect(admin_dsn) if admin_dsn else None
    started = time.monotonic()
    try:
        while not stop.is_set():
            total = sum(rss_kb(s.process.pid) for s in servers)
            figures.rss_kb.append((time.monotonic() - started, total))
            if conn is not None:
                count = await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
                figures.peak_connections = max(
                    figures.peak_connections, int(count) - figures.baseline_connections
                )
                usage = await conn.fetchval("SELECT pg_notification_queue_usage()")
                figures.peak_notify_queue = max(figures.peak_notify_queue, float(usage))
            try:
                await asyncio.wait_for(stop.wait(), 2)
            except TimeoutError:
                pass
    finally:
        if conn is not None:
            await conn.close()


async def make_key(database_url: str) -> str:
    engine = make_engine(Settings(database_url=database_url))
    try:
        accounts = Accounts(open_stores(engine).accounts)
        name = f"r24-{os.getpid()}-{random.randrange(10**6)}"
        await accounts.create_tenant(name)
        raw, _ = await accounts.create_key(name)
        return raw
    finally:
        await engine.dispose()


async def connections(admin_dsn: str) -> int:
    """Server connections to the database now (other than this one)."""
    conn = await asyncpg.connect(admin_dsn)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    finally:
        await conn.close()


async def load(database_url: str, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    key = await make_key(database_url)
    figures = Figures()
    postgres = database_url.startswith("postgresql")
    admin_dsn = (
        make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
        if postgres
        else None
    )
    if admin_dsn is not None:
        # Connections that are not the replicas' (other engines of the calling process).
        figures.baseline_connections = await connections(admin_dsn)
    servers = [
        await asyncio.to_thread(start_server, database_url, log_dir / f"{name}.log", **REPLICA_ENV)
        for name in ("a", "b")
    ]
    headers = {"Authorization": f"Bearer {key}"}
    # Idle connections are dropped before uvicorn's 5 s keep-alive timeout closes them.
    limits = httpx.Limits(
        max_connections=args.in_flight, max_keepalive_connections=args.in_flight, keepalive_expiry=2
    )
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample(servers, admin_dsn, figures, stop))
    clients = [
        httpx.AsyncClient(base_url=s.base_url, headers=headers, timeout=60, limits=limits)
        for s in servers
    ]
    streams = [
        httpx.AsyncClient(base_url=s.base_url, headers=headers, timeout=60, limits=limits)
        for s in servers
    ]
    # Subscribers hold one connection each; requests get the rest of the cap.
    gate = asyncio.Semaphore(max(1, args.in_flight - args.sessions))
    started = time.monotonic()
    deadline = started + args.seconds
    try:
        workers = [
            worker(n, clients, streams, gate, figures, args, deadline) for n in range(args.sessions)
        ]
        await asyncio.wait_for(asyncio.gather(*workers), args.seconds + 60)
    finally:
        stop.set()
        await sampler
        for client in clients + streams:
            await client.aclose()
        for server in servers:
            await asyncio.to_thread(stop_server, server)
    elapsed = time.monotonic() - started
    tracebacks = sum(s.log().count("Traceback") for s in servers)
    return report(figures, elapsed, args, tracebacks, postgres)


def report(
    figures: Figures, elapsed: float, args: argparse.Namespace, tracebacks: int, postgres: bool
) -> dict[str, Any]:
    window = [kb for t, kb in figures.rss_kb if t >= elapsed - 120]
    growth = (window[-1] - window[0]) / window[0] if len(window) >= 2 else None
    p95_append = percentile(figures.append_ms, 0.95)
    p95_sse = percentile(figures.sse_ms, 0.95)
    server_errors = sum(c for s, c in figures.statuses.items() if s >= 500)
    connection_cap = 2 * (POOL_SIZE + MAX_OVERFLOW) + 2  # + one listener per replica
    checks = {
        "no_5xx": server_errors == 0,
        "no_lost_or_duplicate_events": not figures.problems,
        "p95_append_under_150ms": p95_append is not None and p95_append < 150,
        "p95_commit_to_sse_under_500ms": p95_sse is not None and p95_sse < 500,
        "no_tracebacks": tracebacks == 0,
    }
    if elapsed >= 180:  # the growth window is the last two minutes
        checks["rss_growth_last_2min_under_10pct"] = growth is not None and growth < 0.10
    if postgres:
        checks["connections_within_pools"] = figures.peak_connections <= connection_cap
        checks["notify_queue_under_1pct"] = figures.peak_notify_queue < 0.01
    return {
        "seconds": round(elapsed, 1),
        "sessions_concurrent": args.sessions,
        "sessions_done": figures.sessions,
        "events_audited": figures.events,
        "requests": sum(figures.statuses.values()),
        "retries_after_transport_errors": figures.retries,
        "statuses": {str(k): v for k, v in sorted(figures.statuses.items())},
        "appends": len(figures.append_ms),
        "appends_per_s": round(len(figures.append_ms) / elapsed, 1),
        "append_ms": {
            "p50": percentile(figures.append_ms, 0.5),
            "p95": p95_append,
            "p99": percentile(figures.append_ms, 0.99),
        },
        "commit_to_sse_ms": {
            "p50": percentile(figures.sse_ms, 0.5),
            "p95": p95_sse,
            "p99": percentile(figures.sse_ms, 0.99),
            "n": len(figures.sse_ms),
        },
        "rss_mb_first_last": [
            round(figures.rss_kb[0][1] / 1024, 1) if figures.rss_kb else None,
            round(figures.rss_kb[-1][1] / 1024, 1) if figures.rss_kb else None,
        ],
        "rss_growth_last_2min": None if growth is None else round(growth, 4),
        "peak_db_connections": figures.peak_connections if postgres else None,
        "db_connection_cap": connection_cap if postgres else None,
        "peak_notify_queue_usage": figures.peak_notify_queue if postgres else None,
        "problems": figures.problems,
        "checks": checks,
        "passed": all(checks.values()),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True, help="a migrated database")
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--appends", type=int, default=20)
    parser.add_argument("--think-ms", type=float, default=1000)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument(
        "--round-seconds", type=float, default=20, help="no new round this close to the end"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="asr-r24-") as tmp:
        result = asyncio.run(load(args.database_url, args, Path(tmp)))
    print(json.dumps(result, indent=2))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
