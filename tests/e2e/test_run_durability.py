"""Run durability with real processes: SIGKILL mid-run (lease expiry, at-most-once tools)
and SIGSTOP past the lease (R12 fencing). Each server runs with a 2 s lease."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, TenantKey, start_server, stop_server

FAST_LEASE = {"ASR_RUN_LEASE_SECONDS": "2", "ASR_RUN_SWEEP_SECONDS": "0.5"}


@pytest.fixture
def pair(database_url: str, tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    a = start_server(database_url, tmp_path / "a.log", **FAST_LEASE)
    b = start_server(database_url, tmp_path / "b.log", **FAST_LEASE)
    yield a, b
    for s in (a, b):
        if s.process.poll() is None:
            os.kill(s.process.pid, signal.SIGCONT)
            stop_server(s)


async def events_of(http: httpx.AsyncClient, sid: str) -> list[dict]:
    return (await http.get(f"/v1/sessions/{sid}/events", params={"limit": 1000})).json()["data"]


async def wait_for(predicate, *, within: float, step: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(step)
    raise AssertionError(f"condition not met within {within} s")


async def test_sigkill_mid_tool_call_is_interrupted_and_never_reexecuted(
    pair: tuple[Server, Server], tenant: TenantKey
) -> None:
    a, b = pair
    async with (
        httpx.AsyncClient(base_url=a.base_url, headers=tenant.headers, timeout=30) as on_a,
        httpx.AsyncClient(base_url=b.base_url, headers=tenant.headers, timeout=30) as on_b,
    ):
        sid = (await on_a.post("/v1/sessions", json={})).json()["session_id"]
        started = await on_a.post(
            f"/v1/sessions/{sid}/runs",
            json={"input": '[tool:sleep {"ms": 20000}]', "mode": "background"},
        )
        run_id = started.json()["run_id"]

        async def tool_started() -> bool:
            return any(e["type"] == "TOOL_CALL" for e in await events_of(on_b, sid))

        await wait_for(tool_started, within=10)
        before = await events_of(on_b, sid)
        a.process.send_signal(signal.SIGKILL)
        a.process.wait(timeout=10)

        async def interrupted() -> dict | None:
            # Fenced first (status), closed right after (events): wait for both.
            run = (await on_b.get(f"/v1/sessions/{sid}/runs/{run_id}")).json()
            finished = any(
                e["type"] == "RUN_FINISHED" and e["run_id"] == run_id
                for e in await events_of(on_b, sid)
            )
            return run if run["status"] == "interrupted" and finished else None

        run = await wait_for(interrupted, within=15)  # lease 2 s + sweep 0.5 s, bounded
        assert run["stop_reason"] == "INTERRUPTED"
        after = await events_of(on_b, sid)
        assert after[: len(before)] == before  # nothing committed before the kill was lost
        assert [e["seq"] for e in after] == list(range(1, len(after) + 1))
        tail = [e["type"] for e in after[len(before) :]]
        assert tail == ["TOOL_RESULT", "AUTO_STOP", "RUN_FINISHED"]
        result = after[len(before)]["payload"]["item"]["output"]
        assert result.startswith("error: interrupted")  # answered, never run again
        assert (await on_b.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"]
        again = await on_b.post(f"/v1/sessions/{sid}/runs", json={"input": "still there"})
        assert again.json()["stop_reason"] == "COMPLETED"


async def test_r12_a_paused_owner_cannot_write_after_takeover(
    pair: tuple[Server, Server], tenant: TenantKey
) -> None:
    a, b = pair
    async with (
        httpx.AsyncClient(base_url=a.base_url, headers=tenant.headers, timeout=30) as on_a,
        httpx.AsyncClient(base_url=b.base_url, headers=tenant.headers, timeout=30) as on_b,
    ):
        sid = (await on_a.post("/v1/sessions", json={})).json()["session_id"]
        started = await on_a.post(
            f"/v1/sessions/{sid}/runs", json={"input": "[sleep:3000] fenced", "mode": "background"}
        )
        run_id = started.json()["run_id"]

        async def requested() -> bool:
            return any(e["type"] == "MODEL_REQUEST" for e in await events_of(on_b, sid))

        await wait_for(requested, within=10)
        a.process.send_signal(signal.SIGSTOP)
        try:

            async def taken_over() -> bool:
                run = (await on_b.get(f"/v1/sessions/{sid}/runs/{run_id}")).json()
                return run["status"] == "interrupted"

            await wait_for(taken_over, within=15)
        finally:
            a.process.send_signal(signal.SIGCONT)
        await asyncio.sleep(4)  # A's model call ends and it tries to write
        events = await events_of(on_b, sid)
        mine = [e["type"] for e in events if e["run_id"] == run_id]
        assert mine[-2:] == ["AUTO_STOP", "RUN_FINISHED"]
        assert "MODEL_RESPONSE" not in mine and mine.count("RUN_FINISHED") == 1
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        ok = await on_a.post(f"/v1/sessions/{sid}/runs", json={"input": "after"})
        assert ok.json()["stop_reason"] == "COMPLETED"
    assert "Traceback" not in a.log()


async def test_r5_kill_at_random_points_of_a_long_run(
    database_url: str, tmp_path: Path, tenant: TenantKey
) -> None:
    """R5 (short form: 5 kills): a 30-turn run is killed at a random seq; after the lease
    expires the other replica closes it; nothing committed is lost, no gap, one terminal."""
    import random

    rng = random.Random(5)
    survivor = start_server(database_url, tmp_path / "survivor.log", **FAST_LEASE)
    try:
        async with httpx.AsyncClient(
            base_url=survivor.base_url, headers=tenant.headers, timeout=30
        ) as on_b:
            for attempt in range(5):
                victim = start_server(database_url, tmp_path / f"victim{attempt}.log", **FAST_LEASE)
                async with httpx.AsyncClient(
                    base_url=victim.base_url, headers=tenant.headers, timeout=30
                ) as on_a:
                    sid = (
                        await on_a.post(
                            "/v1/sessions",
                            json={"agent": {"max_auto_followups": 40, "max_total_turns": 40}},
                        )
                    ).json()["session_id"]
                    run_id = (
                        await on_a.post(
                            f"/v1/sessions/{sid}/runs",
                            json={"input": "[continue:30] [sleep:60]", "mode": "background"},
                        )
                    ).json()["run_id"]
                    k = rng.randint(5, 45)

                    async def reached(k: int = k, sid: str = sid) -> list[dict] | None:
                        seen = await events_of(on_b, sid)
                        return seen if seen and seen[-1]["seq"] >= k else None

                    seen = await wait_for(reached, within=20, step=0.02)
                    victim.process.send_signal(signal.SIGKILL)
                    victim.process.wait(timeout=10)

                async def closed(sid: str = sid, run_id: str = run_id) -> bool:
                    run = (await on_b.get(f"/v1/sessions/{sid}/runs/{run_id}")).json()
                    finished = any(
                        e["type"] == "RUN_FINISHED" and e["run_id"] == run_id
                        for e in await events_of(on_b, sid)
                    )
                    return run["status"] in ("interrupted", "finished") and finished

                await wait_for(closed, within=10)
                after = await events_of(on_b, sid)
                assert after[: len(seen)] == seen
                assert [e["seq"] for e in after] == list(range(1, len(after) + 1))
                assert [e["type"] for e in after].count("RUN_FINISHED") == 1
                assert (await on_b.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"]
    finally:
        stop_server(survivor)
