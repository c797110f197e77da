"""Operations against real `asr serve` processes.

- Readiness on PostgreSQL: a throwaway cluster (initdb + pg_ctl from the PostgreSQL server
  binaries, on a free loopback port) is started, left unmigrated, migrated, stopped and
  started again; `/readyz` follows each step (503 with a reason, 200) while `/healthz` stays
  200. Runs in the PostgreSQL pass only, and needs the server binaries and a `postgres`
  system user (initdb refuses to run as root); elsewhere it is skipped with the reason.
- SIGTERM: the process logs JSON lines, sets its shutdown event at once (logged), and ends
  cleanly (uvicorn re-raises the signal after its shutdown); a bounded wait stops a hung exit.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.store.migrations import upgrade_head
from tests.conftest import Server, start_server, stop_server
from tests.pgcluster import ThrowawayPostgres, throwaway_cluster

POLL_SECONDS = 20


@pytest.fixture
def throwaway_postgres(is_postgres: bool) -> Iterator[ThrowawayPostgres]:
    if not is_postgres:
        pytest.skip("the readiness outage test runs in the PostgreSQL pass")
    with throwaway_cluster() as cluster:
        yield cluster


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + POLL_SECONDS
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    pytest.fail(f"not within {POLL_SECONDS} s: {what}")


def _ready(server: Server) -> httpx.Response:
    return httpx.get(server.base_url + "/readyz", timeout=5)


def _healthy(server: Server) -> bool:
    return httpx.get(server.base_url + "/healthz", timeout=5).status_code == 200


def test_readyz_follows_the_database_through_an_outage(
    throwaway_postgres: ThrowawayPostgres, tmp_path: Path
) -> None:
    pg = throwaway_postgres
    server = start_server(pg.url, tmp_path / "server.log")
    try:
        first = _ready(server)
        assert first.status_code == 503 and first.json()["reason"] == "schema_not_migrated"
        upgrade_head(pg.url)
        _wait_for(lambda: _ready(server).status_code == 200, "ready after migrate")

        pg.stop("fast")
        _wait_for(lambda: _ready(server).status_code == 503, "not ready with the database down")
        down = _ready(server)
        assert down.json()["reason"] == "database_unreachable", down.text
        assert down.headers["content-type"] == "application/problem+json"
        assert _healthy(server)

        pg.start()
        _wait_for(lambda: _ready(server).status_code == 200, "ready once the database is back")
        assert _ready(server).json()["schema"]["state"] == "at_head"
        assert _healthy(server)
    finally:
        stop_server(server)


def test_sigterm_sets_the_shutdown_event_and_exits_cleanly(
    database_url: str, tmp_path: Path
) -> None:
    server = start_server(database_url, tmp_path / "server.log", ASR_LOG_LEVEL="info")
    try:
        response = httpx.get(server.base_url + "/healthz", headers={"X-Request-ID": "probe-1"})
        assert response.headers["x-request-id"] == "probe-1"
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(timeout=25)  # bounded: a hung exit fails here
    finally:
        if server.process.poll() is None:
            server.process.kill()
    # uvicorn re-raises the captured signal once it has shut down cleanly.
    assert code in (0, -signal.SIGTERM), server.log()[-3000:]
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    messages = [entry["msg"] for entry in lines]
    assert "shutdown requested: draining" in messages
    access = [e for e in lines if e.get("logger") == "app.access"]
    assert any(e["request_id"] == "probe-1" and e["route"] == "/healthz" for e in access)
    assert "Traceback" not in server.log()
