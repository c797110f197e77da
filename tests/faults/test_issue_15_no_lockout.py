"""Issue #15: a keyed request whose replica died is not locked out, and runs once.

The bug it guards against: the key was claimed in a transaction of its own before the work.
When the replica died after its run had started, the claim stayed "in flight" for 60 s, and
the client's retry on another replica was refused with 409 `idempotency_in_flight` all that
time — and once the claim expired, the retry started the run a second time.

Runs in both tiers, on the suite's database (`database_url`): two replicas share it (on
SQLite, two processes on one file).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.conftest import TenantKey
from tests.faults.audit import Verdict, ledger, marker_counts, settle
from tests.faults.replicas import Replica, start_all

RETRY_WINDOW = 10.0  # "a few seconds": the lease (3 s) and a sweep, far below the 60 s lock

pytestmark = pytest.mark.timeout(300)


async def _until_started(client: httpx.AsyncClient, sid: str, text: str) -> None:
    """Wait (at most 15 s) until the run's RUN_STARTED is committed."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if marker_counts(await ledger(client, sid))["start:" + text]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the run did not start within 15 s")


async def _retry(
    client: httpx.AsyncClient, path: str, body: bytes, headers: dict[str, str]
) -> tuple[httpx.Response | None, Counter[str]]:
    """Send the request again until a 2xx, for at most RETRY_WINDOW seconds; the answer
    and what was seen before it."""
    seen: Counter[str] = Counter()
    deadline = time.monotonic() + RETRY_WINDOW
    while time.monotonic() < deadline:
        try:
            response = await client.post(path, content=body, headers=headers)
        except httpx.TransportError as exc:
            seen[type(exc).__name__] += 1
        else:
            if response.is_success:
                return response, seen
            code = response.json().get("code") if response.content else None
            seen[f"{response.status_code} {code}"] += 1
        await asyncio.sleep(0.2)
    return None, seen


async def test_a_retry_after_kill9_is_answered_and_runs_once(
    database_url: str, tenant: TenantKey, tmp_path: Path
) -> None:
    a, b = (Replica(n, {"ASR_DATABASE_URL": database_url}, tmp_path / f"{n}.log") for n in "ab")
    try:
        await start_all([a, b])
        async with (
            httpx.AsyncClient(base_url=a.base_url, headers=tenant.headers, timeout=30) as on_a,
            httpx.AsyncClient(base_url=b.base_url, headers=tenant.headers, timeout=30) as on_b,
        ):
            sid = (await on_a.post("/v1/sessions", json={})).json()["session_id"]
            # B's first read pays its start-up (imports, its first connection): paid here,
            # it cannot let A's run end before B has seen it start.
            await ledger(on_b, sid)
            text = f"[sleep:3000] x {uuid.uuid4().hex}"
            path = f"/v1/sessions/{sid}/runs"
            body = json.dumps({"input": text, "mode": "wait"}).encode()
            headers = {"Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"}
            first = asyncio.create_task(on_a.post(path, content=body, headers=headers))
            await _until_started(on_b, sid, text)
            a.kill()
            (cut,) = await asyncio.gather(first, return_exceptions=True)
            assert isinstance(cut, httpx.TransportError), f"A answered before the kill: {cut}"

            answer, seen = await _retry(on_b, path, body, headers)
            assert answer is not None, (
                f"no 2xx from B within {RETRY_WINDOW} s of the kill; it answered {dict(seen)}"
            )
            verdict = Verdict()
            await settle(on_b, [sid], verdict)
            counts = marker_counts(await ledger(on_b, sid))
            assert (counts["input:" + text], counts["start:" + text]) == (1, 1), (
                f"USER_INPUT and RUN_STARTED of the run: {counts['input:' + text]}, "
                f"{counts['start:' + text]} (B answered {answer.status_code} after {dict(seen)})"
            )
    finally:
        for replica in (a, b):
            await asyncio.to_thread(replica.stop)
