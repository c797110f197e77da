"""cancel_cross_replica: a cancel taken by one replica stops a run that another executes.

Two real `asr serve` processes (A and B) on one PostgreSQL. A client waits (`mode: wait`)
on A for a slow run (`[sleep:60000]`, the scripted model); once the run's MODEL_REQUEST is
in the ledger, the cancel is sent to B. Measured: from sending the cancel to the waiting
client's answer on A. The baseline is the same with the cancel sent to A itself (the
owner), measured in the same run. Each replica's lease is 600 s, so the lease-renewal
fallback (every 200 s) can never be what releases a client here: only the control
message on the bus can. Target: p99 < 1 s.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import Figure, Sizes
from bench.sse_fanout import _percentile, _tenant_key, start_server, stop_server

_ENV = {
    "ASR_LOG_LEVEL": "warning",
    "ASR_RUN_LEASE_SECONDS": "600",
    "ASR_MAX_RUNS_PER_MINUTE": "1000000",
}
_SLOW = {"input": "[sleep:60000] slow", "mode": "wait"}
_STARTED_WITHIN = 10.0


async def _model_called(http: httpx.AsyncClient, sid: str, after: int) -> int:
    """Seq of the run's MODEL_REQUEST once it is in the ledger (polled every 10 ms)."""
    deadline = time.monotonic() + _STARTED_WITHIN
    while time.monotonic() < deadline:
        events = await http.get(
            f"/v1/sessions/{sid}/events", params={"after_seq": after, "types": "MODEL_REQUEST"}
        )
        data = events.json()["data"]
        if data:
            return data[-1]["seq"]
        await asyncio.sleep(0.01)
    raise RuntimeError("the run did not call its model in time")


async def _one(
    owner: httpx.AsyncClient, canceller: httpx.AsyncClient, sid: str, after: int
) -> tuple[float, int]:
    """One run waited for on `owner`, cancelled through `canceller`: (seconds, last seq)."""
    waiting = asyncio.create_task(owner.post(f"/v1/sessions/{sid}/runs", json=_SLOW))
    try:
        await _model_called(canceller, sid, after)
        runs = (await canceller.get(f"/v1/sessions/{sid}/runs")).json()["data"]
        run_id = runs[0]["run_id"]
        sent = time.perf_counter()
        cancel = asyncio.create_task(canceller.post(f"/v1/sessions/{sid}/runs/{run_id}/cancel"))
        answer = await asyncio.wait_for(waiting, 30)
        released = time.perf_counter() - sent
        (await cancel).raise_for_status()
    except BaseException:
        waiting.cancel()
        raise
    body = answer.json()
    if body.get("status") != "interrupted":
        raise RuntimeError(f"the run was not interrupted: {body}")
    # The closing events are written by the canceller right after it answers; the next run
    # starts after them.
    last = (await canceller.get(f"/v1/sessions/{sid}")).json()["last_seq"]
    return released, last


async def _series(owner: httpx.AsyncClient, canceller: httpx.AsyncClient, runs: int) -> list[float]:
    sid = (await owner.post("/v1/sessions", json={})).json()["session_id"]
    last = 0
    seconds = []
    for _ in range(runs):
        released, last = await _one(owner, canceller, sid, last)
        seconds.append(released)
    return seconds


async def cancel_cross_replica(url: str, sizes: Sizes, log: Any, workdir: Path) -> list[Figure]:
    key = await _tenant_key(url)
    a = await asyncio.to_thread(start_server, url, workdir / "cancel-a.log", env=_ENV)
    b = await asyncio.to_thread(start_server, url, workdir / "cancel-b.log", env=_ENV)
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with (
            httpx.AsyncClient(base_url=a.base_url, headers=headers, timeout=60) as on_a,
            httpx.AsyncClient(base_url=b.base_url, headers=headers, timeout=60) as on_b,
        ):
            await _series(on_a, on_b, 2)  # warm both (imports, pools, LISTEN)
            log(f"  cancel_cross_replica: {sizes.cancel_runs} runs, cancel on the owner")
            same = await _series(on_a, on_a, sizes.cancel_runs)
            log(f"  cancel_cross_replica: {sizes.cancel_runs} runs, cancel on the other")
            cross = await _series(on_a, on_b, sizes.cancel_runs)
    finally:
        await asyncio.to_thread(stop_server, a)
        await asyncio.to_thread(stop_server, b)

    def ms(values: list[float], q: float) -> float:
        return round(_percentile(values, q) * 1000, 2)

    p99 = ms(cross, 0.99)
    return [
        Figure(
            "cancel_cross_replica",
            "ms p99",
            p99,
            ms(same, 0.99),
            "the cancel sent to the owner itself (same replica, same run of the bench)",
            False,
            samples=[round(s * 1000, 2) for s in cross],
            baseline_samples=[round(s * 1000, 2) for s in same],
            extra={
                "p50_ms": ms(cross, 0.5),
                "p99_ms": p99,
                "max_ms": round(max(cross) * 1000, 2),
                "baseline_p50_ms": ms(same, 0.5),
                "baseline_p99_ms": ms(same, 0.99),
                "runs": len(cross),
                "lease_fallback_s": 200,
            },
        )
    ]
