"""SSE fan-out: N subscribers on one session of a real `asr serve`, on loopback.

    python -m bench.sse_fanout                       # N = 1 (baseline), 10, 100, 500; SQLite
    python -m bench.sse_fanout --subscribers 500 --database-url postgresql+asyncpg://...

For each N it opens N streams on a fresh session (each confirmed subscribed), then a
producer appends events at a fixed rate (`--producer items`) or runs the scripted model
(`--producer run`). Latency runs from an event's `created_at`, stamped inside its write
transaction just before the commit, to the moment a subscriber's socket returns its frame.
Prints one JSON document: latency p50/p95/p99/max, events/s delivered across all
subscribers, and the server's RSS before and after. N = 1 is the raw baseline of the same
run. Everything is bounded in count and time and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from app.runtime.access.accounts import Accounts
from app.settings import Settings
from app.store.engine import make_engine
from app.store.migrations import upgrade_head
from app.store.stores import open_stores

_ID = re.compile(rb"\nid: (\d+)\r")
_PHASE_SECONDS = 120.0
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Server:
    base_url: str
    process: subprocess.Popen[bytes]


def start_server(
    database_url: str,
    log_path: Path,
    *args: str,
    workers: int = 1,
    env: Mapping[str, str] | None = None,
) -> Server:
    """`asr serve` (with `args`, and `env` added to its environment) on a free 127.0.0.1
    port, returned once /healthz answers (and, with `workers` > 1, once that many distinct
    worker processes have answered)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    environment = {
        **os.environ,
        "ASR_DATABASE_URL": database_url,
        "ASR_BOOTSTRAP_DEFAULT_TENANT": "false",
        **(env or {}),
    }
    command = [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("wb") as log:  # the server writes to its own copy of the descriptor
        process = subprocess.Popen(
            [*command, "--workers", str(workers), *args],
            cwd=ROOT,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    seen: set[str] = set()
    healthy_at: float | None = None
    for _ in range(600 * workers):  # 60 s a worker
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {log_path.read_text()[-2000:]}")
        try:
            if workers == 1 and httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return Server(base, process)
            if workers > 1:
                # Each worker is its own process: its start time tells them apart (to the
                # clock tick: workers started in the same one are given 30 s instead).
                text = httpx.get(base + "/metrics", timeout=1).text
                seen |= set(re.findall(r"^process_start_time_seconds (\S+)$", text, re.M))
                healthy_at = healthy_at or time.monotonic()
                if len(seen) >= workers or time.monotonic() - healthy_at > 30:
                    return Server(base, process)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server did not become healthy in {60 * workers} s")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=25)
    except subprocess.TimeoutExpired:
        server.process.kill()


class Subscriber:
    """A lean SSE client: it only finds `id:` lines in what the socket returns, so that the
    client's own parsing stays small next to the server's work."""

    def __init__(self) -> None:
        self.arrived: dict[int, float] = {}
        self._last = 0

    async def run(self, port: int, path: str, key: str, ready: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                f"Authorization: Bearer {key}\r\n\r\n".encode()
            )
            await writer.drain()
            tail = b""
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    return
                now = time.time()
                data = tail + chunk
                for match in _ID.finditer(data):
                    seq = int(match.group(1))
                    if seq > self._last:
                        self._last = seq
                        self.arrived[seq] = now
                        ready.set()
                tail = data[-64:]
        finally:
            writer.close()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _tenant_key(database_url: str) -> str:
    engine = make_engine(Settings(database_url=database_url))
    try:
        accounts = Accounts(open_stores(engine).accounts)
        name = f"bench-{os.getpid()}-{time.monotonic_ns()}"
        await accounts.create_tenant(name)
        raw, _ = await accounts.create_key(name)
        return raw
    finally:
        await engine.dispose()


async def _produce_items(http: httpx.AsyncClient, sid: str, events: int, rate: float) -> None:
    started = time.monotonic()
    for i in range(events):
        delay = started + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        item = {"type": "message", "role": "user", "content": f"bench {i}"}
        response = await http.post(f"/v1/sessions/{sid}/items", json={"items": [item]})
        response.raise_for_status()


async def _produce_run(http: httpx.AsyncClient, sid: str, events: int) -> None:
    # Each scripted turn writes a handful of events; enough turns for about `events`.
    turns = min(100, max(1, events // 6))
    body = {
        "input": f"[continue:{turns}] [sleep:20]",
        "mode": "wait",
        "limits": {"max_auto_followups": turns, "max_total_turns": turns + 1},
    }
    (await http.post(f"/v1/sessions/{sid}/runs", json=body)).raise_for_status()


async def _created_at(http: httpx.AsyncClient, sid: str) -> dict[int, float]:
    out: dict[int, float] = {}
    after = 0
    for _ in range(1000):  # bounded paging
        page = (
            await http.get(f"/v1/sessions/{sid}/events", params={"after_seq": after, "limit": 1000})
        ).json()
        for event in page["data"]:
            out[event["seq"]] = datetime.fromisoformat(event["created_at"]).timestamp()
        if page["next_after_seq"] is None:
            return out
        after = page["next_after_seq"]
    return out


async def measure(
    server: Server, key: str, n: int, *, events: int, rate: float, producer: str
) -> dict[str, Any]:
    port = int(server.base_url.rsplit(":", 1)[1])
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=60) as http:
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        path = f"/v1/sessions/{sid}/events/stream"
        subscribers = [Subscriber() for _ in range(n)]
        readies = [asyncio.Event() for _ in range(n)]
        gate = asyncio.Semaphore(100)

        async def start(sub: Subscriber, ready: asyncio.Event) -> asyncio.Task[None]:
            async with gate:
                task = asyncio.create_task(sub.run(port, path, key, ready))
                await asyncio.wait_for(ready.wait(), 30)  # got seq 1: subscribed
                return task

        opened = time.monotonic()
        pairs = zip(subscribers, readies, strict=True)
        tasks = await asyncio.gather(*(start(s, r) for s, r in pairs))
        connect_s = time.monotonic() - opened
        rss_before = _rss_mb(server.process.pid)
        first = time.time()
        if producer == "run":
            await _produce_run(http, sid, events)
        else:
            await _produce_items(http, sid, events, rate)
        produced_s = time.time() - first
        head = (await http.get(f"/v1/sessions/{sid}")).json()["last_seq"]
        for _ in range(int(_PHASE_SECONDS / 0.05)):  # bounded wait for the last deliveries
            if all(head in s.arrived for s in subscribers):
                break
            await asyncio.sleep(0.05)
        last = max((max(s.arrived.values()) for s in subscribers if s.arrived), default=first)
        rss_after = _rss_mb(server.process.pid)
        created = await _created_at(http, sid)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    latencies = [
        (at - created[seq]) * 1000
        for s in subscribers
        for seq, at in s.arrived.items()
        if seq > 1 and seq in created
    ]
    delivered = len(latencies)
    expected = n * (head - 1)
    return {
        "subscribers": n,
        "events": head - 1,
        "delivered": delivered,
        "missing": expected - delivered,
        "latency_ms": {
            "p50": round(statistics.median(latencies), 2),
            "p95": round(_percentile(latencies, 0.95), 2),
            "p99": round(_percentile(latencies, 0.99), 2),
            "max": round(max(latencies), 2),
        },
        "events_per_s_produced": round((head - 1) / max(produced_s, 1e-9), 1),
        "events_per_s_delivered": round(delivered / max(last - first, 1e-9)),
        "connect_seconds": round(connect_s, 2),
        "server_rss_mb": {"before": round(rss_before, 1), "after": round(rss_after, 1)},
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    database_url = args.database_url
    workdir = Path(tempfile.mkdtemp(prefix="asr-bench-"))
    if database_url is None:
        database_url = f"sqlite+aiosqlite:///{workdir / 'bench.db'}"
    await asyncio.to_thread(upgrade_head, database_url)
    key = await _tenant_key(database_url)
    counts = [1, *[n for n in args.subscribers if n != 1]]
    env = {
        "ASR_SSE_MAX_STREAMS_PER_TENANT": str(max(counts) + 10),
        "ASR_LOG_LEVEL": "warning",
    }
    if getattr(args, "read_urls", None):
        env["ASR_DATABASE_READ_URLS"] = args.read_urls
        env["ASR_DB_READ_CONSISTENCY"] = getattr(args, "consistency", None) or "strict"
    server = await asyncio.to_thread(start_server, database_url, workdir / "server.log", env=env)
    try:
        results = []
        for n in counts:
            result = await measure(
                server, key, n, events=args.events, rate=args.rate, producer=args.producer
            )
            results.append(result)
            print(json.dumps(result), file=sys.stderr, flush=True)
    finally:
        await asyncio.to_thread(stop_server, server)
    return {
        "backend": "postgresql" if database_url.startswith("postgresql") else "sqlite",
        "producer": args.producer,
        "rate_per_s": args.rate if args.producer == "items" else None,
        "baseline": results[0],
        "results": results[1:],
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.sse_fanout", description=__doc__)
    parser.add_argument(
        "--subscribers",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[10, 100, 500],
        help="comma-separated subscriber counts (N = 1 always runs first, as the baseline)",
    )
    parser.add_argument("--events", type=int, default=200, help="events per measurement")
    parser.add_argument("--rate", type=float, default=100.0, help="items producer: events/s")
    parser.add_argument("--producer", choices=("items", "run"), default="items")
    parser.add_argument(
        "--database-url",
        default=None,
        help="default: a temporary SQLite file; or postgresql+asyncpg://...",
    )
    parser.add_argument(
        "--read-urls",
        default=None,
        help="ASR_DATABASE_READ_URLS for the server: read replicas of --database-url",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 1 <= max(args.subscribers) <= 2000 or not 1 <= args.events <= 10_000:
        raise SystemExit("bounded: at most 2000 subscribers and 10000 events")
    print(json.dumps(asyncio.run(main_async(args)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
