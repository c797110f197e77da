"""`asr serve --workers N` (issue #21): N processes on one port, each a full replica.

Black-box, as an operator runs it: the real command in a subprocess, sessions and runs
through its port, a stream token minted on one connection and used on many others (so on
whichever worker accepts them), then SIGTERM, which must stop every worker cleanly.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, free_port

_START_SECONDS = 180.0  # every worker imports the app afresh; slow on a loaded machine


def _asr(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ASR_DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _workers_of(pid: int) -> list[int]:
    """The spawned worker processes of the supervisor `pid` (not its resource tracker)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    workers = []
    for child in children:
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            workers.append(int(child))
    return workers


def test_workers_are_refused_on_sqlite(tmp_path: Path) -> None:
    """SQLite has one writer: more processes would only queue on its lock, so say so."""
    done = _asr(f"sqlite+aiosqlite:///{tmp_path / 'w.db'}", "serve", "--workers", "2")
    assert done.returncode == 2
    assert "--workers > 1 needs PostgreSQL" in done.stderr


def test_two_workers_serve_sessions_on_postgres(database_url: str, tmp_path: Path) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("--workers needs PostgreSQL")
    name = f"workers-{os.getpid()}-{time.time_ns()}"
    assert _asr(database_url, "tenant", "create", name).returncode == 0
    key = _asr(database_url, "key", "create", "--tenant", name).stdout.strip().splitlines()[-1]
    port = free_port()
    log = tmp_path / "serve.log"
    env = {
        **os.environ,
        "ASR_DATABASE_URL": database_url,
        "ASR_BOOTSTRAP_DEFAULT_TENANT": "false",
        "ASR_LOG_LEVEL": "info",
    }
    env.pop("ASR_STREAM_TOKEN_SECRET", None)  # the supervisor must give the workers one
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", "2"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        # A bounded wait for both workers (a loop bound, not a speed claim).
        for _ in range(int(_START_SECONDS / 0.2)):
            if log.read_text().count("Application startup complete") >= 2:
                break
            assert process.poll() is None, log.read_text()[-4000:]
            time.sleep(0.2)
        else:
            pytest.fail("the two workers never both started:\n" + log.read_text()[-4000:])
        assert len(_workers_of(process.pid)) == 2
        asyncio.run(_sessions_through(f"http://127.0.0.1:{port}", key))
    finally:
        process.terminate()
        code = process.wait(timeout=60)
    text = log.read_text()
    assert code == 0, text[-4000:]
    assert text.count("Application shutdown complete") == 2, text[-4000:]
    assert "Traceback" not in text, text[-4000:]


async def _sessions_through(base: str, key: str) -> None:
    """Sessions and wait-mode runs over fresh connections (spread over the workers), then a
    stream token used on connections of its own."""
    headers = {"Authorization": f"Bearer {key}"}

    async def one(i: int) -> None:
        # A client per session: new connections, accepted by whichever worker is free.
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as http:
            created = await http.post("/v1/sessions", json={})
            assert created.status_code == 201, created.text
            sid = created.json()["session_id"]
            for turn in range(3):
                run = await http.post(
                    f"/v1/sessions/{sid}/runs", json={"input": f"hi {i}.{turn}", "mode": "wait"}
                )
                assert run.status_code == 200, run.text
                assert run.json()["output"] == f"echo: hi {i}.{turn}"
            memory = (await http.get(f"/v1/sessions/{sid}/memory")).json()
            assert len(memory["items"]) == 6

    await asyncio.gather(*(one(i) for i in range(8)))
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as http:
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        token = (await http.post("/v1/stream-tokens", json={"session_id": sid})).json()["token"]
    for _ in range(6):
        async with (
            httpx.AsyncClient(base_url=base, timeout=60) as fresh,
            fresh.stream(
                "GET", f"/v1/sessions/{sid}/events/stream", params={"token": token}
            ) as stream,
        ):
            assert stream.status_code == 200
