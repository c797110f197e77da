"""Delta fan-out across replicas: token deltas of runs on replica A reach subscribers on A
and on B (two `asr serve` on one PostgreSQL, deltas relayed by NOTIFY), on loopback.

    python -m bench.delta_fanout --database-url postgresql+asyncpg://... [--subscribers 50]

Subscribers (half on each replica) follow one session with `include=deltas` while runs of
`[words:N]` execute on A one after the other. Latency runs from the moment A's model
produced a frame's first chunk (`emitted_at` in the frame) to the moment a subscriber's
socket returns that frame: on A (the owner's own subscribers, the baseline) and on B (the
figure). Every subscriber's frames of every run are checked: offsets contiguous from 0 and
the text equal to the run's answer; a frame out of place counts as out of order, a run
whose text is incomplete as missing. Prints one JSON document. Bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.store.migrations import upgrade_head
from bench.sse_fanout import Server, _percentile, _tenant_key, start_server, stop_server

_PHASE_SECONDS = 60.0


@dataclass
class DeltaSubscriber:
    """A lean SSE client that keeps delta frames (with arrival times) and counts the runs
    it saw finish."""

    remote: bool
    frames: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    finished: int = 0

    async def run(self, port: int, path: str, key: str, ready: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                f"Authorization: Bearer {key}\r\n\r\n".encode()
            )
            await writer.drain()
            pending = b""
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    return
                now = time.time()
                *blocks, pending = (pending + chunk).split(b"\r\n\r\n")
                for block in blocks:
                    self._take(block, now)
                    if b"\nid: " in block or block.startswith(b"id: "):
                        ready.set()
        finally:
            writer.close()

    def _take(self, block: bytes, now: float) -> None:
        if b"event: delta\r\n" in block:
            data = block.split(b"data: ", 1)[1].split(b"\r\n", 1)[0]
            self.frames.append((now, json.loads(data)))
        elif b"event: RUN_FINISHED\r\n" in block:
            self.finished += 1


def _check(sub: DeltaSubscriber, answers: dict[str, str]) -> tuple[int, int, list[float]]:
    """(frames out of order, runs with text missing, latencies in ms) of one subscriber."""
    by_run: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    for at, frame in sub.frames:
        by_run.setdefault(frame["run_id"], []).append((at, frame))
    out_of_order = missing = 0
    latencies: list[float] = []
    for run_id, answer in answers.items():
        offset, text = 0, []
        for at, frame in by_run.get(run_id, []):
            if frame["offset"] != offset or frame.get("catch_up"):
                out_of_order += 1
            offset = frame["offset"] + len(frame["text"])
            text.append(frame["text"])
            latencies.append((at - frame["emitted_at"]) * 1000)
        missing += int("".join(text) != answer)
    return out_of_order, missing, latencies


async def measure(
    a: Server, b: Server, key: str, *, subscribers: int, runs: int, words: int
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=a.base_url, headers=headers, timeout=120) as http:
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        path = f"/v1/sessions/{sid}/events/stream?include=deltas"
        subs = [DeltaSubscriber(remote=i % 2 == 1) for i in range(subscribers)]
        readies = [asyncio.Event() for _ in subs]
        tasks = []
        for sub, ready in zip(subs, readies, strict=True):
            port = int((b if sub.remote else a).base_url.rsplit(":", 1)[1])
            tasks.append(asyncio.create_task(sub.run(port, path, key, ready)))
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
        answers: dict[str, str] = {}
        started = time.monotonic()
        for _ in range(runs):
            body = {"input": f"[words:{words}]", "mode": "wait"}
            response = await http.post(f"/v1/sessions/{sid}/runs", json=body)
            response.raise_for_status()
            answers[response.json()["run_id"]] = response.json()["output"]
        for _ in range(int(_PHASE_SECONDS / 0.05)):  # bounded wait for the last frames
            if all(s.finished >= runs for s in subs):
                break
            await asyncio.sleep(0.05)
        seconds = time.monotonic() - started
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    result: dict[str, Any] = {"subscribers": subscribers, "runs": runs, "words": words}
    for label, remote in (("owner", False), ("remote", True)):
        out_of_order = missing = frames = 0
        latencies: list[float] = []
        for sub in (s for s in subs if s.remote == remote):
            o, m, lat = _check(sub, answers)
            out_of_order, missing, frames = out_of_order + o, missing + m, frames + len(lat)
            latencies += lat
        result[label] = {
            "subscribers": sum(1 for s in subs if s.remote == remote),
            "frames": frames,
            "out_of_order": out_of_order,
            "runs_with_text_missing": missing,
            "latency_ms": {
                "p50": round(statistics.median(latencies), 2) if latencies else None,
                "p99": round(_percentile(latencies, 0.99), 2) if latencies else None,
                "max": round(max(latencies), 2) if latencies else None,
            },
        }
    result["seconds"] = round(seconds, 2)
    return result


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    database_url = args.database_url
    if not database_url.startswith("postgresql"):
        raise SystemExit("two replicas need PostgreSQL")
    workdir = Path(tempfile.mkdtemp(prefix="asr-bench-deltas-"))
    await asyncio.to_thread(upgrade_head, database_url)
    key = await _tenant_key(database_url)
    env = {
        "ASR_SSE_MAX_STREAMS_PER_TENANT": str(args.subscribers + 10),
        "ASR_LOG_LEVEL": "warning",
    }
    a = await asyncio.to_thread(start_server, database_url, workdir / "a.log", env=env)
    try:
        b = await asyncio.to_thread(start_server, database_url, workdir / "b.log", env=env)
        try:
            return await measure(
                a, b, key, subscribers=args.subscribers, runs=args.runs, words=args.words
            )
        finally:
            await asyncio.to_thread(stop_server, b)
    finally:
        await asyncio.to_thread(stop_server, a)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.delta_fanout", description=__doc__)
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--words", type=int, default=400)
    parser.add_argument("--database-url", required=True, help="postgresql+asyncpg://...")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 2 <= args.subscribers <= 500 or not 1 <= args.runs <= 200 or args.words > 5000:
        raise SystemExit("bounded: 2..500 subscribers, 1..200 runs, at most 5000 words")
    print(json.dumps(asyncio.run(main_async(args)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
