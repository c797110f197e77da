"""Runs over HTTP: wait-mode runs of the scripted model through a real `asr serve`, driven by
wrk (a separate process, in C) with 32 connections, next to two baselines served the same
way in the same run: the real limit, a bare FastAPI handler that makes exactly the writes an
echo run makes through the bare driver (`bench.bare_app --writes`: the same stored functions
on PostgreSQL, the same statements on SQLite), which every run figure is a ratio to; and a
bare FastAPI POST returning a constant (the HTTP stack alone), kept in each figure's extra.

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

from bench.common import Figure, Sizes, asyncpg_dsn, median
from bench.sse_fanout import ROOT, Server, start_server, stop_server

LUA = Path(__file__).with_name("runs.lua")
RUN_BODY = {"input": "hello", "mode": "wait"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_bare(log_path: Path, *args: str) -> Server:
    """`bench.bare_app` on a free port (`args`: `--writes URL --tenant T --events FILE`)."""
    port = _free_port()
    with log_path.open("wb") as log:  # the app writes to its own copy of the descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.bare_app", str(port), *args],
            cwd=ROOT,
            stdout=log,
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
    url: str,
    seconds: float,
    clients: int,
    env: dict[str, str],
    threads: int = 2,
    patience: float = 10.0,
) -> dict[str, Any]:
    threads = min(threads, clients)
    proc = await asyncio.create_subprocess_exec(
        "wrk",
        f"-t{threads}",
        f"-c{clients}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        f"{max(1, round(patience))}s",
        "-s",
        str(LUA),
        url,
        env={**os.environ, **env, "ASR_BENCH_THREADS": str(threads)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=seconds + patience + 60)
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


async def _tenant(database_url: str) -> tuple[str, str]:
    """A new tenant's id and an API key of it."""
    from app.runtime.access.accounts import Accounts
    from app.settings import Settings
    from app.store.engine import make_engine
    from app.store.stores import open_stores

    engine = make_engine(Settings(database_url=database_url))
    try:
        accounts = Accounts(open_stores(engine).accounts)
        name = f"bench-{os.getpid()}-{time.monotonic_ns()}"
        tenant = await accounts.create_tenant(name)
        raw, _ = await accounts.create_key(name)
        return tenant.tenant_id, raw
    finally:
        await engine.dispose()


async def record_run(http: httpx.AsyncClient, path: Path) -> None:
    """Write to `path` the three event batches (start, request step, response and end) a
    real echo run committed, with its run id as a placeholder: the same-writes baseline
    inserts exactly these rows."""
    from bench.bare_app import RUN

    sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
    run = (await http.post(f"/v1/sessions/{sid}/runs", json=RUN_BODY)).json()
    run_id = run["run_id"]
    page = await http.get(f"/v1/sessions/{sid}/events", params={"run_id": run_id})
    batches: list[list[dict[str, Any]]] = [[], [], []]
    index = 0
    for event in page.json()["data"]:
        if event["type"] == "STEP_START" or (index == 1 and event["type"] == "MODEL_RESPONSE"):
            index += 1
        payload = json.dumps(event["payload"], separators=(",", ":"), ensure_ascii=False)
        turn = event["turn_id"]
        batches[index].append(
            {
                "type": event["type"],
                "turn_id": turn.replace(run_id, RUN) if turn else None,
                "payload": payload.replace(run_id, RUN),
            }
        )
    options: dict[str, Any] = {"multitask": "reject", "client_tools": [], "approval_required": [],
               "limits": {}, "on_tool_error": None}  # fmt: skip
    doc = {"batches": batches, "options": options, "usage": run["usage"], "output": run["output"]}
    await asyncio.to_thread(path.write_text, json.dumps(doc))


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) used so far by process `pid` and its children processes
    (a `--workers` supervisor's workers)."""
    total = 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return total
    return total + sum(cpu_seconds(int(child)) for child in children)


# (label, server, run mode, sessions): what each repetition measures, in this order.
_MEASURED = (
    ("writes", "writes", "wait", "fresh"),
    # The wait-mode runs on fresh sessions sit between the two figures compared with them,
    # stream mode and sessions of 1,000 events: the server's cost per run drifts over a
    # long bench (its caches and the tables grow), and each repetition pairs neighbours.
    ("stream", "server", "stream", "fresh"),
    ("fresh", "server", "wait", "fresh"),
    ("1000", "server", "wait", "1000"),
    ("workers1", "server", "wait", "fresh"),
    ("workers2", "workers2", "wait", "fresh"),
)


async def vacuum(url: str) -> None:
    """`VACUUM (ANALYZE)` the tables that every run rewrites, on PostgreSQL.

    A server with autovacuum off (this machine's CI configuration) never cleans them during
    the bench: the dead index entries that each phase leaves in `runs` are walked by the
    live-run count of every later run start, our server's and the same-writes handler's
    alike, so throughput fell phase by phase (about 3x within one run) and a ratio depended
    on the order of the phases. Each phase starts vacuumed, as under autovacuum.
    """
    if not url.startswith("postgresql"):
        return
    import asyncpg

    conn = await asyncpg.connect(asyncpg_dsn(url), timeout=10)
    try:
        await conn.execute("VACUUM (ANALYZE) runs, sessions")
    finally:
        await conn.close()


async def http_run(url: str, sizes: Sizes, log: Any, workdir: Path) -> list[Figure]:
    if shutil.which("wrk") is None:
        raise RuntimeError("http_run needs wrk (Debian: apt-get install -y wrk)")
    tenant_id, key = await _tenant(url)
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
    servers: dict[str, Server] = {}
    pool = clients * 4
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in _MEASURED}
    results["bare"] = []
    try:
        servers["server"] = await asyncio.to_thread(
            start_server, url, workdir / "server.log", env=env
        )
        servers["bare"] = await asyncio.to_thread(start_bare, workdir / "bare.log")
        if url.startswith("postgresql"):
            # The docs' rule: each worker's pool sized for its share of the clients.
            per_worker = {**env, "ASR_DB_POOL_SIZE": str(2 * (clients // 2) + 8)}
            servers["workers2"] = await asyncio.to_thread(
                start_server, url, workdir / "workers2.log", workers=2, env=per_worker
            )
        headers = {"Authorization": f"Bearer {key}"}
        base_url = servers["server"].base_url
        async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as h:
            recorded = workdir / "echo-run.json"
            await record_run(h, recorded)
            servers["writes"] = await asyncio.to_thread(
                start_bare,
                workdir / "bare-writes.log",
                *("--writes", url, "--tenant", tenant_id, "--events", str(recorded)),
                *("--pool-size", env["ASR_DB_POOL_SIZE"]),
            )
            template = await _template(h, sizes.http_preload_events)
            preload = (await h.get(f"/v1/sessions/{template}")).json()["last_seq"]
            log(f"  http_run: template session holds {preload} events")
            session_file = workdir / "sessions.txt"

            async def measure(
                target: str, mode: str, sessions: str, seconds: float
            ) -> dict[str, Any]:
                # New sessions every time, so "fresh" stays fresh.
                ids = await _sessions(h, pool, template if sessions == "1000" else None)
                await asyncio.to_thread(session_file.write_text, "\n".join(ids) + "\n")
                run_env = {
                    "ASR_BENCH_KEY": key,
                    "ASR_BENCH_MODE": "runs",
                    "ASR_BENCH_RUN_MODE": mode,
                    "ASR_BENCH_SESSIONS": str(session_file),
                }
                await vacuum(url)
                server = servers[target]
                cpu = cpu_seconds(server.process.pid)
                stats = await _wrk(server.base_url, seconds, clients, run_env)
                ok = max(1, stats["requests"] - stats["status_errors"])
                stats["cpu_ms_per_run"] = (cpu_seconds(server.process.pid) - cpu) * 1000 / ok
                return stats

            bare_env = {"ASR_BENCH_MODE": "bare"}
            # Warm every server (imports, pools, caches), then alternate the measurements.
            warm = sizes.http_warmup_seconds
            await _wrk(servers["bare"].base_url, warm, clients, bare_env)
            for target in ("writes", "server", "workers2"):
                if target in servers:
                    await measure(target, "wait", "fresh", warm)
            for rep in range(sizes.repeats):
                results["bare"].append(
                    await _wrk(servers["bare"].base_url, sizes.http_seconds, clients, bare_env)
                )
                for label, target, mode, sessions in _MEASURED:
                    if target not in servers:
                        continue
                    stats = await measure(target, mode, sessions, sizes.http_seconds)
                    results[label].append(stats)
                    log(f"  http_run {label} rep {rep}: {stats}")
    finally:
        for server in servers.values():
            await asyncio.to_thread(stop_server, server)
    return _figures(results, clients, preload)


def _figures(results: dict[str, list[dict[str, Any]]], clients: int, preload: int) -> list[Figure]:
    def med(label: str, key: str) -> float:
        return median([float(r[key]) for r in results[label]])

    def samples(label: str) -> list[float]:
        return [r["ok_per_s"] for r in results[label]]

    def latency(label: str, baseline: str) -> dict[str, Any]:
        return {
            "clients": clients,
            "p50_ms": med(label, "p50_us") / 1000,
            "p99_ms": med(label, "p99_us") / 1000,
            "p99_over_p50": round(med(label, "p99_us") / max(med(label, "p50_us"), 1), 2),
            "baseline_p99_ms": med(baseline, "p99_us") / 1000,
            "cpu_ms_per_run": round(med(label, "cpu_ms_per_run"), 2),
            "status_errors": sum(r["status_errors"] for r in results[label]),
            "socket_errors": sum(r["errors"] for r in results[label]),
        }

    bare_rps = med("bare", "ok_per_s")
    writes_rps = med("writes", "ok_per_s")
    figures = []
    for label, name in (("fresh", "http_run_fresh"), ("1000", "http_run_1000")):
        figures.append(
            Figure(
                name,
                "runs/s",
                med(label, "ok_per_s"),
                writes_rps,
                "bare FastAPI handler making the same writes with the bare driver",
                True,
                samples(label),
                samples("writes"),
                {
                    **latency(label, "writes"),
                    "bare_post_per_s": round(bare_rps, 1),
                    "ratio_to_bare_post": round(med(label, "ok_per_s") / bare_rps, 4),
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
    paired = [
        round(s["cpu_ms_per_run"] / w["cpu_ms_per_run"], 3)
        for s, w in zip(results["stream"], results["fresh"], strict=True)
    ]
    figures.append(
        Figure(
            "http_run_stream_cpu",
            "ms CPU/run",
            med("stream", "cpu_ms_per_run"),
            med("fresh", "cpu_ms_per_run"),
            "the server's CPU per wait-mode run, this run",
            False,
            [r["cpu_ms_per_run"] for r in results["stream"]],
            [r["cpu_ms_per_run"] for r in results["fresh"]],
            {
                **latency("stream", "fresh"),
                "runs_per_s": round(med("stream", "ok_per_s"), 1),
                # Each repetition's stream/wait ratio (measured back to back): steadier than
                # the ratio of the medians when the machine drifts between repetitions.
                "paired_ratios": paired,
                "paired_median": round(median(paired), 3),
            },
        )
    )
    if results["workers2"]:
        figures.append(
            Figure(
                "http_run_workers2",
                "runs/s",
                med("workers2", "ok_per_s"),
                med("workers1", "ok_per_s"),
                "asr serve --workers 1, same load, this run",
                True,
                samples("workers2"),
                samples("workers1"),
                latency("workers2", "workers1"),
            )
        )
    return figures
