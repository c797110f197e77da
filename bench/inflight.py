"""Runs in flight: many runs whose model takes seconds, the case real traffic is made of.

The other HTTP figures measure instant runs (the scripted model answers at once); a real run
waits on its model, so what a replica must do well is hold many runs open at little CPU each.
Through a real `asr serve` (default settings, the per-tenant caps raised: they are not what
is measured), wrk (a separate process, in C) keeps N connections busy, each posting runs on
sessions of its own:

- **wait mode**: the scripted model sleeps `model_ms` (`[sleep:MS]`) before it answers; the
  baseline is the same-writes handler of `bench.bare_app` sleeping as long between its request
  step and its response (`--model-ms`), served the same way;
- **stream mode**: the model streams `deltas` words `pace_ms` apart (`[words:N][pace:MS]`) and
  wrk reads each SSE answer to its end; the baseline is a bare `StreamingResponse` writing the
  frames a real streamed run sent, at the same pace (`bench.bare_app --frames`).

Each figure is runs/s beside its baseline's, with p50/p99 latency, the server's CPU per run
(user + system, from /proc, over the measured window, divided by the runs completed in it),
its peak RSS, and on PostgreSQL the most connections of the database in use at once (sampled
from `pg_stat_activity` every 200 ms). Runs still open when wrk stops are not counted; the
next phase waits for them to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

import httpx

from bench.common import Figure, Sizes, asyncpg_dsn, median
from bench.http_run import _sessions, _tenant, _wrk, cpu_seconds, record_run, start_bare, vacuum
from bench.sse_fanout import Server, start_server, stop_server


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class ConnectionsInUse:
    """The most connections of the bench's database that were not idle at once, sampled
    every 200 ms while the phase runs (PostgreSQL only: SQLite has no pool to watch)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.peak = 0
        self.opened = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ConnectionsInUse:
        if self.url.startswith("postgresql"):
            self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _sample(self) -> None:
        import asyncpg

        conn = await asyncpg.connect(asyncpg_dsn(self.url), timeout=10)
        try:
            for _ in range(100_000):  # bounded; cancelled when the phase ends
                row = await conn.fetchrow(
                    "SELECT count(*) FILTER (WHERE state <> 'idle') AS busy, count(*) AS opened"
                    " FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
                self.peak = max(self.peak, int(row["busy"]))
                self.opened = max(self.opened, int(row["opened"]))
                await asyncio.sleep(0.2)
        finally:
            await conn.close()


async def record_frames(
    http: httpx.AsyncClient, text: str, deltas: int, pace_ms: int, path: Path
) -> None:
    """Write to `path` the frames of one real streamed run of `text`, for the bare SSE app:
    its event frames as sent, and one delta frame per word the model produced (the service
    may coalesce deltas for a subscriber that lags; the floor writes every one)."""
    sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
    body = b""
    async with http.stream(
        "POST", f"/v1/sessions/{sid}/runs", json={"input": text, "mode": "stream"}
    ) as response:
        response.raise_for_status()
        async for chunk in response.aiter_bytes():
            body += chunk
    frames: list[str] = []
    template: dict[str, Any] | None = None
    for frame in body.decode().split("\r\n\r\n"):
        if not frame.strip():
            continue
        if frame.startswith("event: delta"):
            if template is None:
                template = json.loads(frame.split("data: ", 1)[1])
                offset = 0
                for i in range(deltas):
                    word = f"word{i + 1}" if i == 0 else f" word{i + 1}"
                    data = {**template, "text": word, "offset": offset}
                    offset += len(word)
                    frames.append(f"event: delta\r\ndata: {json.dumps(data)}\r\n\r\n")
            continue
        frames.append(frame + "\r\n\r\n")
    await asyncio.to_thread(path.write_text, json.dumps({"frames": frames, "pace_ms": pace_ms}))


async def inflight(url: str, sizes: Sizes, log: Any, workdir: Path) -> list[Figure]:
    if shutil.which("wrk") is None:
        raise RuntimeError("inflight needs wrk (Debian: apt-get install -y wrk)")
    tenant_id, key = await _tenant(url)
    env = {
        "ASR_LOG_LEVEL": "warning",
        "ASR_MAX_RUNS_PER_MINUTE": "1000000",
        "ASR_MAX_LIVE_RUNS_PER_TENANT": "100000",
        "ASR_SSE_MAX_STREAMS_PER_TENANT": "100000",
    }
    servers: dict[str, Server] = {}
    figures: list[Figure] = []
    try:
        server = servers["server"] = await asyncio.to_thread(
            start_server, url, workdir / "inflight-server.log", env=env
        )
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=120) as h:
            recorded = workdir / "inflight-echo-run.json"
            await record_run(h, recorded)
            session_file = workdir / "inflight-sessions.txt"

            async def phase(
                target: Server, clients: int, seconds: float, run_s: float, env: dict[str, str]
            ) -> dict[str, Any]:
                """One wrk window on `target`, whose runs take `run_s` seconds each."""
                if env.get("ASR_BENCH_MODE") == "runs":
                    ids = await _sessions(h, clients * 2, None)
                    await asyncio.to_thread(session_file.write_text, "\n".join(ids) + "\n")
                await vacuum(url)
                cpu = cpu_seconds(target.process.pid)
                async with ConnectionsInUse(url) as pool:
                    stats = await _wrk(target.base_url, seconds, clients, env, patience=run_s + 30)
                ok = max(1, stats["requests"] - stats["status_errors"])
                stats["cpu_ms_per_run"] = (cpu_seconds(target.process.pid) - cpu) * 1000 / ok
                stats["peak_rss_mb"] = round(peak_rss_mb(target.process.pid), 1)
                stats["db_connections_busy_peak"] = pool.peak
                stats["db_connections_opened_peak"] = pool.opened
                # Runs that wrk cut off at the end of its window finish before the next phase.
                await asyncio.sleep(run_s + 1)
                return stats

            runs_env = {"ASR_BENCH_KEY": key, "ASR_BENCH_MODE": "runs",
                        "ASR_BENCH_SESSIONS": str(session_file)}  # fmt: skip
            for model_ms, clients in sizes.inflight_wait:
                bare = servers[f"bare-{model_ms}"] = await asyncio.to_thread(
                    start_bare,
                    workdir / f"inflight-bare-{model_ms}.log",
                    *("--writes", url, "--tenant", tenant_id, "--events", str(recorded)),
                    *("--model-ms", str(model_ms), "--pool-size", "20"),
                )
                seconds = max(sizes.inflight_seconds, 3 * model_ms / 1000)
                run_s = model_ms / 1000
                wait_env = {**runs_env, "ASR_BENCH_RUN_MODE": "wait",
                            "ASR_BENCH_INPUT": f"[sleep:{model_ms}] hello"}  # fmt: skip
                ours: list[dict[str, Any]] = []
                base: list[dict[str, Any]] = []
                await phase(server, clients, sizes.http_warmup_seconds, run_s, wait_env)
                for rep in range(sizes.repeats):
                    ours.append(await phase(server, clients, seconds, run_s, wait_env))
                    base.append(await phase(bare, clients, seconds, run_s, wait_env))
                    log(f"  inflight wait {model_ms} ms x {clients} rep {rep}: "
                        f"{_brief(ours[-1])} | bare {_brief(base[-1])}")  # fmt: skip
                await asyncio.to_thread(stop_server, servers.pop(f"bare-{model_ms}"))
                figures.append(
                    _figure(
                        f"inflight_wait_{model_ms}ms_{clients}",
                        ours,
                        base,
                        "bare handler: the same writes around the same sleep",
                        {
                            "in_flight": clients,
                            "model_ms": model_ms,
                            "ideal_runs_per_s": round(clients * 1000 / model_ms, 1),
                        },
                    )
                )
            for deltas, pace_ms, clients in sizes.inflight_stream:
                text = f"[words:{deltas}][pace:{pace_ms}] hello"
                frames = workdir / f"inflight-frames-{deltas}.json"
                await record_frames(h, text, deltas, pace_ms, frames)
                bare = servers["bare-sse"] = await asyncio.to_thread(
                    start_bare, workdir / "inflight-bare-sse.log", "--frames", str(frames)
                )
                run_s = deltas * pace_ms / 1000
                stream_env = {**runs_env, "ASR_BENCH_RUN_MODE": "stream", "ASR_BENCH_INPUT": text}
                bare_env = {"ASR_BENCH_MODE": "bare", "ASR_BENCH_BARE_PATH": "/sse"}
                ours, base = [], []
                await phase(server, clients, sizes.http_warmup_seconds, run_s, stream_env)
                for rep in range(sizes.repeats):
                    ours.append(await phase(server, clients, sizes.inflight_seconds, run_s,
                                            stream_env))  # fmt: skip
                    base.append(await phase(bare, clients, sizes.inflight_seconds, run_s,
                                            bare_env))  # fmt: skip
                    log(f"  inflight stream {deltas}x{pace_ms} ms x {clients} rep {rep}: "
                        f"{_brief(ours[-1])} | bare {_brief(base[-1])}")  # fmt: skip
                await asyncio.to_thread(stop_server, servers.pop("bare-sse"))
                figures.append(
                    _figure(
                        f"inflight_stream_{clients}",
                        ours,
                        base,
                        "bare StreamingResponse: the same frames at the same pace",
                        {"in_flight": clients, "deltas": deltas, "pace_ms": pace_ms},
                    )
                )
    finally:
        for running in servers.values():
            await asyncio.to_thread(stop_server, running)
    return figures


def _brief(stats: dict[str, Any]) -> str:
    return (
        f"{stats['ok_per_s']:.1f} runs/s p50 {stats['p50_us'] / 1000:.0f} ms"
        f" p99 {stats['p99_us'] / 1000:.0f} ms cpu {stats['cpu_ms_per_run']:.1f} ms/run"
        f" errors {stats['errors'] + stats['status_errors']}"
    )


def _figure(
    name: str,
    ours: list[dict[str, Any]],
    base: list[dict[str, Any]],
    label: str,
    extra: dict[str, Any],
) -> Figure:
    def med(results: list[dict[str, Any]], key: str) -> float:
        return median([float(r[key]) for r in results])

    cpu, base_cpu = med(ours, "cpu_ms_per_run"), med(base, "cpu_ms_per_run")
    return Figure(
        name,
        "runs/s",
        med(ours, "ok_per_s"),
        med(base, "ok_per_s"),
        label,
        True,
        [r["ok_per_s"] for r in ours],
        [r["ok_per_s"] for r in base],
        {
            **extra,
            "p50_ms": med(ours, "p50_us") / 1000,
            "p99_ms": med(ours, "p99_us") / 1000,
            "baseline_p50_ms": med(base, "p50_us") / 1000,
            "baseline_p99_ms": med(base, "p99_us") / 1000,
            "cpu_ms_per_run": round(cpu, 2),
            "baseline_cpu_ms_per_run": round(base_cpu, 2),
            "cpu_ratio": round(cpu / base_cpu, 2) if base_cpu else None,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in ours),
            "baseline_peak_rss_mb": max(r["peak_rss_mb"] for r in base),
            "db_connections_busy_peak": max(r["db_connections_busy_peak"] for r in ours),
            "db_connections_opened_peak": max(r["db_connections_opened_peak"] for r in ours),
            "errors": sum(r["errors"] + r["status_errors"] for r in ours),
            "baseline_errors": sum(r["errors"] + r["status_errors"] for r in base),
        },
    )
