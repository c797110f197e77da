"""Issue #20, schedules: two `asr serve` replicas on one PostgreSQL, each running its
scheduler loop (every 0.2 s), fire a schedule's ticks exactly once between them.

- A schedule every second for 30 s starts 30 runs (give or take the tick at either end),
  no tick twice, one run per tick; once paused, none more.
- Both replicas stopped and started again: the ticks of the outage are missed (older than
  the misfire grace); `skip` drops them all, `run_once` fires exactly one for them. Either
  way every tick of the grid is accounted for exactly once, by a run or by the skipped
  record, which says how many ticks it stands for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from app.store.engine import make_engine
from app.store.migrations import upgrade_head
from app.store.stores import open_stores
from tests.conftest import (
    Server,
    TenantKey,
    create_database,
    drop_database,
    make_tenant,
    start_server,
    stop_server,
)

GRACE = 3  # seconds: ASR_SCHEDULE_MISFIRE_GRACE_SECONDS of the missed-tick test


def _scheduler(grace: float) -> dict[str, str]:
    return {
        "ASR_SCHEDULES_ENABLED": "true",
        "ASR_SCHEDULE_POLL_SECONDS": "0.2",
        "ASR_SCHEDULE_CLAIM_SECONDS": "5",
        "ASR_SCHEDULE_MISFIRE_GRACE_SECONDS": str(grace),
    }


@pytest.fixture
def postgres(database_url: str, tmp_path: Path) -> Iterator[str]:
    """A database of the test's own. Every scheduler fires the due ticks of every tenant, so
    on the suite's shared database any other server still up (or the test process) would
    fire this test's ticks too, "outage" included; here only the test's replicas can."""
    if not database_url.startswith("postgresql"):
        pytest.skip("replicas share a database: PostgreSQL (SQLite has one process)")
    url = create_database(tmp_path, "schedules")
    upgrade_head(url)
    yield url
    drop_database(url)


@pytest.fixture
async def tenant(postgres: str) -> AsyncIterator[TenantKey]:
    """A tenant of the test's own database."""
    engine = make_engine(Settings(database_url=postgres))
    try:
        yield await make_tenant(open_stores(engine))
    finally:
        await engine.dispose()


def _start_pair(url: str, logs: Path, tag: str, *, grace: float = GRACE) -> list[Server]:
    # A busy machine may start a server slowly, so the wait for it is long.
    env = _scheduler(grace)
    return [
        start_server(url, logs / f"{tag}-{name}.log", ready_seconds=120, **env) for name in "ab"
    ]


def _stop_all(servers: list[Server]) -> None:
    for server in servers:
        if server.process.poll() is None:
            stop_server(server)
        assert "Traceback" not in server.log(), server.log()[-4000:]


@pytest.fixture
def pair(postgres: str, tmp_path: Path) -> Iterator[list[Server]]:
    # A long grace: a replica slowed down by a busy machine catches up instead of skipping.
    servers = _start_pair(postgres, tmp_path, "first", grace=30)
    yield servers
    _stop_all(servers)


async def _fires(http: httpx.AsyncClient, schedule_id: str) -> list[dict]:
    out: list[dict] = []
    cursor = None
    for _ in range(20):  # bounded: at most 20 pages of 500
        params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        page = (await http.get(f"/v1/schedules/{schedule_id}/runs", params=params)).json()
        out += page["data"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    return out


async def _run_ids(http: httpx.AsyncClient, session_id: str) -> list[str]:
    return [r["run_id"] for r in (await http.get(f"/v1/sessions/{session_id}/runs")).json()["data"]]


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _covered_ticks(fires: list[dict]) -> list[datetime]:
    """Every tick the fires account for (a skipped record stands for `ticks` of them)."""
    ticks: list[datetime] = []
    for fire in fires:
        first = _at(fire["tick_at"])
        ticks += [first + timedelta(seconds=i) for i in range(fire["ticks"])]
    return sorted(ticks)


async def test_every_second_for_30_s_on_two_replicas_starts_30_runs_none_twice(
    pair: list[Server], tenant: TenantKey
) -> None:
    a, b = pair
    async with (
        httpx.AsyncClient(base_url=a.base_url, headers=tenant.headers, timeout=30) as on_a,
        httpx.AsyncClient(base_url=b.base_url, headers=tenant.headers, timeout=30) as on_b,
    ):
        sid = (await on_a.post("/v1/sessions", json={})).json()["session_id"]
        made = await on_b.post(
            "/v1/schedules",
            json={
                "session_id": sid,
                "input": "tick",
                "interval_seconds": 1,
                "multitask": "enqueue",
            },
        )
        assert made.status_code == 201, made.text
        sch = made.json()["schedule_id"]
        await asyncio.sleep(30)
        paused = await on_a.post(f"/v1/schedules/{sch}/pause")
        assert paused.status_code == 200
        await asyncio.sleep(2)  # a tick being fired at the pause completes
        fires = await _fires(on_b, sch)
        runs = await _run_ids(on_a, sid)
        await asyncio.sleep(3)
        assert await _fires(on_a, sch) == fires, "a paused schedule fired"
        assert await _run_ids(on_b, sid) == runs

    started = [f for f in fires if f["outcome"] == "started"]
    assert [f for f in fires if f["outcome"] != "started"] == []
    assert 29 <= len(started) <= 31, len(started)
    ticks = [f["tick_at"] for f in started]
    assert len(set(ticks)) == len(ticks), "a tick fired twice"
    assert sorted(f["run_id"] for f in started) == sorted(runs), "one run per tick, no other"
    grid = _covered_ticks(started)
    assert grid == [grid[0] + timedelta(seconds=i) for i in range(len(grid))], "a tick lost"


@pytest.mark.parametrize(("missed", "fired_for_outage"), [("skip", 0), ("run_once", 1)])
async def test_missed_ticks_after_both_replicas_stopped(
    postgres: str, tmp_path: Path, tenant: TenantKey, missed: str, fired_for_outage: int
) -> None:
    servers = _start_pair(postgres, tmp_path, "before")
    try:
        async with httpx.AsyncClient(
            base_url=servers[0].base_url, headers=tenant.headers, timeout=30
        ) as http:
            sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
            body = {"session_id": sid, "interval_seconds": 1, "missed": missed}
            sch = (await http.post("/v1/schedules", json={**body, "multitask": "enqueue"})).json()[
                "schedule_id"
            ]
            await asyncio.sleep(3)
    finally:
        _stop_all(servers)
    outage_started = time.time()
    await asyncio.sleep(8)  # every tick of the outage is older than the grace at restart
    servers = _start_pair(postgres, tmp_path, "after")
    try:
        async with httpx.AsyncClient(
            base_url=servers[1].base_url, headers=tenant.headers, timeout=30
        ) as http:
            await asyncio.sleep(3)
            await http.post(f"/v1/schedules/{sch}/pause")
            await asyncio.sleep(1)
            fires = await _fires(http, sch)
            runs = await _run_ids(http, sid)
    finally:
        _stop_all(servers)

    skipped = [f for f in fires if f["outcome"] == "skipped"]
    started = [f for f in fires if f["outcome"] == "started"]
    assert {f["reason"] for f in skipped} == {"missed"}, fires
    # The outage: the longest run of missed ticks (a busy machine may add short ones).
    gap = max(skipped, key=lambda f: f["ticks"])
    assert gap["ticks"] >= 8 - GRACE - 1 - fired_for_outage, gap
    assert _at(gap["tick_at"]).timestamp() >= outage_started - 2  # of the outage, not before
    for_missed = [f for f in started if f["reason"] == "missed"]
    after_gap = _at(gap["tick_at"]) + timedelta(seconds=gap["ticks"])
    if fired_for_outage:  # run_once: one run, for the newest missed tick, after the others
        assert after_gap in [_at(f["tick_at"]) for f in for_missed], fires
    else:
        assert for_missed == [], "skip fired a missed tick"
    grid = _covered_ticks(fires)
    assert grid == [grid[0] + timedelta(seconds=i) for i in range(len(grid))], "lost or twice"
    assert sorted(f["run_id"] for f in started) == sorted(runs)
