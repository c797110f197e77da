"""Runs over HTTP: wait-mode runs of the scripted model through a real `asr serve`, driven by
wrk (a separate process, in C) with 32 connections, next to a bare FastAPI POST endpoint
served the same way, in the same run.

Twice: on fresh sessions, and on sessions already holding about 1,000 events (forks of a
session that ran scripted runs until its ledger reached that size, so their history is real:
memory items, run and step events, a snapshot). Every connection works on its own sessions,
round robin, so no request waits on another's run. The tenant quotas (runs per minute, live
runs) are raised for the server under test: they are not what is measured.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import Figure, Sizes, median
from bench.sse_fanout import ROOT, Server, _tenant_key, start_server, stop_server

LUA = Path(__file__).with_name("runs.lua")
RUN_BODY = {"input": "hello", "mode": "wait"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_bare(log_path: Path) -> Server:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.bare_app", str(port)],
        cwd=ROOT,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if process.poll() is not None:
            raise RuntimeError(f"bare app exited: {log_path.read_text()[-2000:]}")
        try:
            if httpx.post(base + "/run", timeout=1).status_code == 200:
                return Server(base, process)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("bare app did not start in 30 s")


async def _wrk(
    url: str, seconds: float, clients: int, env: dict[str, str], threads: int = 2
) -> dict[str, Any]:
    threads = min(threads, clients)
    proc = await asyncio.create_subprocess_exec(
        "wrk",
        f"-t{threads}",
        f"-c{clients}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        str(LUA),
        url,
        env={**os.environ, **env, "ASR_BENCH_THREADS": str(threads)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=seconds + 60)
    text = out.decode()
    for line in text.splitlines():
        if line.startswith("WRK_JSON "):
            stats = json.loads(line[len("WRK_JSON ") :])
            ok = stats["requests"] - stats["status_errors"]
            stats["ok_per_s"] = ok / (stats["duration_us"] / 1e6)
            return stats
    raise RuntimeError(f"wrk failed: {text[-2000:]}")


async def _sessions(http: httpx.AsyncClient, count: int, template: str | None) -> list[str]:
    """`count` fresh sessions, or forks of `template` at its latest seq."""
    gate = asyncio.Semaphore(8)

    async def one() -> str:
        async with gate:
            if template is None:
                response = await http.post("/v1/sessions", json={})
            else:
                response = await http.post(f"/v1/sessions/{template}/fork", json={})
            response.raise_for_status()
            return str(response.json()["session_id"])

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def _template(http: httpx.AsyncClient, events: int) -> str:
    """A session that ran scripted runs until its ledger holds at least `events` events."""
    sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
    last = 0
    for _ in range(events):  # bounded: every run adds several events
        response = await http.post(f"/v1/sessions/{sid}/runs", json=RUN_BODY)
        response.raise_for_status()
        last = response.json().get("last_seq") or last
        if last >= events:
            break
    return str(sid)


async def http_run(url: str, sizes: Sizes, log: Any, workdir: Path) -> list[Figure]:
    if shutil.which("wrk") is None:
        raise RuntimeError("http_run needs wrk (Debian: apt-get install -y wrk)")
    key = await _tenant_key(url)
    clients = sizes.http_clients
    env = {
        "ASR_LOG_LEVEL": "warning",
        "ASR_MAX_RUNS_PER_MINUTE": "1000000",
        "ASR_MAX_LIVE_RUNS_PER_TENANT": "10000",
        # Sized for the load, as an operator would: every client has a request and a run
        # in flight, each using a connection now and then. A pool smaller than that keeps
        # opening and closing overflow connections (measured: 147 runs/s with 20, 201
        # with 40, at 32 clients), which measures connection set-up, not the service.
        "ASR_DB_POOL_SIZE": str(2 * clients + 8),
    }
    server = await asyncio.to_thread(start_server, url, workdir / "server.log", **env)
    bare = await asyncio.to_thread(start_bare, workdir / "bare.log")
    pool = clients * 4
    results: dict[str, list[dict[str, Any]]] = {"bare": [], "fresh": [], "1000": []}
    try:
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=60) as h:
            template = await _template(h, sizes.http_preload_events)
            preload = (await h.get(f"/v1/sessions/{template}")).json()["last_seq"]
            log(f"  http_run: template session holds {preload} events")
            files = {}
            for label, tmpl in (("fresh", None), ("1000", template)):
                ids = await _sessions(h, pool, tmpl)
                files[label] = workdir / f"sessions-{label}.txt"
                files[label].write_text("\n".join(ids) + "\n")
            base_env = {"ASR_BENCH_KEY": key, "ASR_BENCH_MODE": "runs"}
            bare_env = {"ASR_BENCH_MODE": "bare"}
            # Warm both servers (imports, pools, caches), then alternate the measurements.
            await _wrk(bare.base_url, sizes.http_warmup_seconds, clients, bare_env)
            await _wrk(
                server.base_url,
                sizes.http_warmup_seconds,
                clients,
                {**base_env, "ASR_BENCH_SESSIONS": str(files["fresh"])},
            )
            for rep in range(sizes.repeats):
                results["bare"].append(
                    await _wrk(bare.base_url, sizes.http_seconds, clients, bare_env)
                )
                for label in ("fresh", "1000"):
                    # New sessions for every repetition, so "fresh" stays fresh.
                    tmpl = None if label == "fresh" else template
                    ids = await _sessions(h, pool, tmpl)
                    files[label].write_text("\n".join(ids) + "\n")
                    stats = await _wrk(
                        server.base_url,
                        sizes.http_seconds,
                        clients,
                        {**base_env, "ASR_BENCH_SESSIONS": str(files[label])},
                    )
                    results[label].append(stats)
                    log(f"  http_run {label} rep {rep}: {stats}")
    finally:
        await asyncio.to_thread(stop_server, server)
        await asyncio.to_thread(stop_server, bare)

    def med(label: str, key: str) -> float:
        return median([float(r[key]) for r in results[label]])

    bare_rps = med("bare", "ok_per_s")
    figures = []
    for label, name in (("fresh", "http_run_fresh"), (f"{1000}", "http_run_1000")):
        figures.append(
            Figure(
                name,
                "runs/s",
                med(label, "ok_per_s"),
                bare_rps,
                "bare FastAPI POST, same uvicorn setup, same wrk",
                True,
                [r["ok_per_s"] for r in results[label]],
                [r["ok_per_s"] for r in results["bare"]],
                {
                    "clients": clients,
                    "p50_ms": med(label, "p50_us") / 1000,
                    "p99_ms": med(label, "p99_us") / 1000,
                    "baseline_p99_ms": med("bare", "p99_us") / 1000,
                    "status_errors": sum(r["status_errors"] for r in results[label]),
                    "socket_errors": sum(r["errors"] for r in results[label]),
                    **({"preloaded_events": preload} if label == "1000" else {}),
                },
            )
        )
    fresh, loaded = figures
    figures.append(
        Figure(
            "http_run_1000_vs_fresh",
            "runs/s",
            loaded.value,
            fresh.value,
            "the same runs on fresh sessions, this run",
            True,
            extra={
                "p99_ratio": round(loaded.extra["p99_ms"] / max(fresh.extra["p99_ms"], 1e-9), 3)
            },
        )
    )
    return figures
