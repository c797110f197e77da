"""Reads with and without a read replica: the primary's CPU per read.

    python -m bench.read_replica                    # both workloads, both configurations
    python -m bench.read_replica --seconds 10 --readers 8 --subscribers 100

Starts a throwaway primary and a streaming replica of it (`pg_basebackup -R`, as the e2e test
does; needs the PostgreSQL server binaries), then for each configuration (the primary alone;
the primary with `ASR_DATABASE_READ_URLS` = the replica, with `ASR_DB_READ_CONSISTENCY`
strict and then session) runs:

- **event pages**: `--readers` clients read `GET /v1/sessions/{id}/events?limit=100` pages
  of one 201-event session for `--seconds`, on one `asr serve`;
- **sse_fanout**: `bench.sse_fanout` at `--subscribers` subscribers (its producer writes
  through the same server, so the primary also does the writes).

The primary's CPU is read from /proc: every process of its cluster (the postmaster, its
children, and what its finished children used), before and after each workload. Prints one
JSON document: per workload and configuration, the primary's (and replica's) CPU seconds,
the reads or events delivered, the CPU milliseconds per read, reads/s and latency. Loopback
only, bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from app.store.migrations import upgrade_head
from bench import sse_fanout
from bench.sse_fanout import _tenant_key, start_server, stop_server
from tests.pgcluster import ThrowawayPostgres, streaming_replica, throwaway_cluster

_TICK = os.sysconf("SC_CLK_TCK")


def cluster_cpu_seconds(cluster: ThrowawayPostgres) -> float:
    """CPU the cluster's processes have used: the postmaster with its reaped children, and
    the children still running."""
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            pid, ppid = int(entry), int(fields[1])
            if pid == postmaster:
                total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
            elif ppid == postmaster:
                total += int(fields[11]) + int(fields[12])
    return total / _TICK


async def _event_pages(
    base_url: str,
    key: str,
    clusters: tuple[ThrowawayPostgres, ThrowawayPostgres],
    *,
    readers: int,
    seconds: float,
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http:
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        for i in range(200):  # one event each: 201 events, pages of 100 after 0..100
            item = {"type": "message", "role": "user", "content": f"item {i} " + "x" * 200}
            r = await http.post(f"/v1/sessions/{sid}/items", json={"items": [item]})
            assert r.status_code == 201, r.text
        await asyncio.sleep(1.0)  # the replica catches up; no fence is past it afterwards
        latencies: list[float] = []
        deadline = time.monotonic() + seconds

        async def reader(n: int) -> None:
            after = (n * 37) % 100
            while time.monotonic() < deadline:
                started = time.perf_counter()
                r = await http.get(
                    f"/v1/sessions/{sid}/events", params={"after_seq": after, "limit": 100}
                )
                assert r.status_code == 200, r.text
                latencies.append(time.perf_counter() - started)
                after = (after + 53) % 100

        p0, r0 = cluster_cpu_seconds(clusters[0]), cluster_cpu_seconds(clusters[1])
        started = time.monotonic()
        await asyncio.gather(*(reader(n) for n in range(readers)))
        elapsed = time.monotonic() - started
        p1, r1 = cluster_cpu_seconds(clusters[0]), cluster_cpu_seconds(clusters[1])
        metrics = (await http.get("/metrics")).text
    latencies.sort()
    return {
        "primary_cpu_s": p1 - p0,
        "replica_cpu_s": r1 - r0,
        "primary_cpu_ms_per_read": (p1 - p0) * 1000 / max(len(latencies), 1),
        "routed": [line for line in metrics.splitlines() if line.startswith("asr_db_reads_total")],
        "reads": len(latencies),
        "reads_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


async def _measure(
    primary: ThrowawayPostgres,
    replica: ThrowawayPostgres,
    read_urls: str | None,
    args: argparse.Namespace,
    consistency: str = "strict",
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="asr-bench-replica-"))
    out: dict[str, Any] = {}
    key = await _tenant_key(primary.url)
    server = await asyncio.to_thread(
        functools.partial(
            start_server,
            primary.url,
            workdir / "server.log",
            env={
                "ASR_LOG_LEVEL": "warning",
                "ASR_DATABASE_READ_URLS": read_urls or "",
                "ASR_DB_READ_CONSISTENCY": consistency,
            },
        )
    )
    try:
        out["event_pages"] = await _event_pages(
            server.base_url, key, (primary, replica), readers=args.readers, seconds=args.seconds
        )
    finally:
        await asyncio.to_thread(stop_server, server)

    fan_args = argparse.Namespace(
        subscribers=[args.subscribers],
        events=args.events,
        rate=100.0,
        producer="items",
        database_url=primary.url,
        read_urls=read_urls,
        consistency=consistency,
    )
    p0, r0 = cluster_cpu_seconds(primary), cluster_cpu_seconds(replica)
    doc = await sse_fanout.main_async(fan_args)
    p1, r1 = cluster_cpu_seconds(primary), cluster_cpu_seconds(replica)
    result = doc["results"][0] if doc["results"] else doc["baseline"]
    delivered = args.events * (args.subscribers + 1)  # the baseline's one subscriber, too
    out["sse_fanout"] = {
        "subscribers": args.subscribers,
        "p50_ms": result["latency_ms"]["p50"],
        "p99_ms": result["latency_ms"]["p99"],
        "missing": result["missing"],
        "primary_cpu_s": p1 - p0,
        "replica_cpu_s": r1 - r0,
        "primary_cpu_ms_per_event_delivered": (p1 - p0) * 1000 / delivered,
        "primary_cpu_ms_per_event_written": (p1 - p0) * 1000 / (2 * args.events),
    }
    shutil.rmtree(workdir, ignore_errors=True)
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with throwaway_cluster() as primary:
        await asyncio.to_thread(upgrade_head, primary.url)
        replica = streaming_replica(primary)
        try:
            return {
                "primary_only": await _measure(primary, replica, None, args),
                "with_replica": await _measure(primary, replica, replica.url, args),
                "with_replica_session": await _measure(
                    primary, replica, replica.url, args, consistency="session"
                ),
                "readers": args.readers,
                "seconds": args.seconds,
                "cpus": os.cpu_count(),
            }
        finally:
            with contextlib.suppress(Exception):
                replica.stop("immediate")
            shutil.rmtree(replica.root, ignore_errors=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.read_replica", description=__doc__)
    parser.add_argument("--readers", type=int, default=8, help="concurrent page readers")
    parser.add_argument("--seconds", type=float, default=8.0, help="page reading time")
    parser.add_argument("--subscribers", type=int, default=100, help="sse_fanout subscribers")
    parser.add_argument("--events", type=int, default=200, help="sse_fanout events")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 1 <= args.readers <= 64 or not 0 < args.seconds <= 120:
        raise SystemExit("bounded: 1-64 readers, at most 120 s")
    if not 1 <= args.subscribers <= 2000 or not 1 <= args.events <= 10_000:
        raise SystemExit("bounded: at most 2000 subscribers and 10000 events")
    print(json.dumps(asyncio.run(main_async(args)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
