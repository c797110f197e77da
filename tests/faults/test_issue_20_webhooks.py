"""Issue #20: webhooks are delivered at least once, signed and in order, through faults.

Two `asr serve` replicas (both delivering) on a PostgreSQL cluster of the test's own, a
loopback receiver in this process (allowed explicitly: ASR_WEBHOOK_ALLOW_NETWORKS), and a
burst of keyed appends over several sessions. While the burst runs, a replica is killed
(kill -9) while deliveries are in flight and started again, and then PostgreSQL is
restarted. Afterwards the receiver must hold every matching event committed in the ledger
(at least once), every request must verify with `standardwebhooks` (an implementation
independent of ours), and each session's events must arrive in seq order.

    ASR_TEST_DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1/postgres \\
        pytest -s tests/faults/test_issue_20_webhooks.py
    ASR_WEBHOOK_EVENTS=1000 ...    # the full form (default: 200)
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from tests.faults.cluster import PgCluster, create_database
from tests.faults.replicas import Replica, make_api_key, start_all
from tests.loopback import serve
from tests.webhook_receiver import Receiver

pytestmark = pytest.mark.timeout(900)

SESSIONS = 8
WRITERS = 8
TYPES = ["SESSION_CREATED", "MEMORY_ITEMS_APPENDED"]
REPLICA_WEBHOOK_ENV = {
    "ASR_WEBHOOK_ALLOW_NETWORKS": "127.0.0.1/32",
    "ASR_WEBHOOK_POLL_SECONDS": "0.2",
    "ASR_WEBHOOK_TIMEOUT_SECONDS": "2",  # a dead replica's claims lapse after 14 s
    "ASR_WEBHOOK_BACKOFF_BASE_SECONDS": "0.2",
    "ASR_WEBHOOK_BACKOFF_CAP_SECONDS": "2",
}


def _events() -> int:
    return int(os.environ.get("ASR_WEBHOOK_EVENTS", "200"))


async def _keyed(
    clients: list[httpx.AsyncClient], method: str, path: str, body: dict, *, deadline: float
) -> httpx.Response:
    """Send with one Idempotency-Key, alternating replicas, until a 2xx (bounded)."""
    key = {"Idempotency-Key": uuid.uuid4().hex}
    for attempt in range(10_000):
        if time.monotonic() > deadline:
            break
        try:
            answer = await clients[attempt % 2].request(method, path, json=body, headers=key)
            if answer.status_code < 300:
                return answer
        except httpx.HTTPError:
            pass
        await asyncio.sleep(min(0.05 * (attempt + 1), 1.0))
    raise AssertionError(f"{method} {path} never succeeded")


async def _burst(
    clients: list[httpx.AsyncClient], sessions: list[str], n: int, *, deadline: float
) -> None:
    todo = asyncio.Queue[int]()
    for i in range(n):
        todo.put_nowait(i)

    async def worker() -> None:
        while not todo.empty():
            i = todo.get_nowait()
            item = {"type": "message", "role": "user", "content": f"m{i}"}
            path = f"/v1/sessions/{sessions[i % len(sessions)]}/items"
            await _keyed(clients, "POST", path, {"items": [item]}, deadline=deadline)

    await asyncio.gather(*(worker() for _ in range(WRITERS)))


async def _until(check, *, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.1)
    return check()


async def test_burst_with_a_killed_replica_and_a_postgres_restart(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    roles = await asyncio.to_thread(create_database, pg_cluster, f"asr_wh_{uuid.uuid4().hex[:8]}")
    key = await asyncio.to_thread(make_api_key, roles.app_url)
    env = {"ASR_DATABASE_URL": roles.app_url, **REPLICA_WEBHOOK_ENV}
    replicas = [Replica(name, env, tmp_path / f"{name}.log") for name in ("a", "b")]
    receiver = Receiver(delay=0.005)
    n = _events()
    try:
        await start_all(replicas)
        with serve(receiver) as rx_url:
            headers = {"Authorization": f"Bearer {key}"}
            clients = [
                httpx.AsyncClient(base_url=r.base_url, headers=headers, timeout=10)
                for r in replicas
            ]
            deadline = time.monotonic() + 600
            try:
                made = await _keyed(
                    clients,
                    "POST",
                    "/v1/webhooks",
                    {"url": rx_url + "/hook", "event_types": TYPES},
                    deadline=deadline,
                )
                secret, webhook_id = made.json()["secret"], made.json()["webhook_id"]
                sessions = []
                for _ in range(SESSIONS):
                    created = await _keyed(clients, "POST", "/v1/sessions", {}, deadline=deadline)
                    sessions.append(created.json()["session_id"])
                third = n // 3
                await _burst(clients, sessions, third, deadline=deadline)
                # Kill a replica while deliveries are in flight (the receiver is busy).
                seen = len(receiver.snapshot())
                assert await _until(lambda: len(receiver.snapshot()) > seen, seconds=60)
                await replicas[0].restart()
                await _burst(clients, sessions, third, deadline=deadline)
                await asyncio.to_thread(pg_cluster.restart)
                await _burst(clients, sessions, n - 2 * third, deadline=deadline)
                expected: dict[str, str] = {}  # event id -> session
                by_session: dict[str, list[int]] = {}
                for sid in sessions:
                    page = await clients[1].get(
                        f"/v1/sessions/{sid}/events",
                        params={"limit": 1000, "types": ",".join(TYPES)},
                    )
                    events = page.json()["data"]
                    by_session[sid] = [e["seq"] for e in events]
                    expected.update({e["event_id"]: sid for e in events})
                assert len(expected) == n + SESSIONS

                def all_in() -> bool:
                    ids = {r.headers.get("webhook-id") for r in receiver.snapshot()}
                    return set(expected) <= ids

                arrived = await _until(all_in, seconds=240)
                missing = set(expected) - {r.headers.get("webhook-id") for r in receiver.snapshot()}
                assert arrived, f"{len(missing)} events never arrived"
                log = await clients[0].get(
                    f"/v1/webhooks/{webhook_id}/deliveries", params={"status": "failed"}
                )
                assert log.json()["data"] == []
            finally:
                for c in clients:
                    await c.aclose()
        got = receiver.snapshot()
        verifier = Webhook(secret)
        arrivals: dict[str, list[int]] = defaultdict(list)
        for request in got:
            message = verifier.verify(request.body, request.headers)  # raises if forged
            assert message["data"]["event_id"] == request.headers["webhook-id"]
            arrivals[message["data"]["session_id"]].append(message["data"]["seq"])
        for sid, seqs in arrivals.items():
            assert seqs == sorted(seqs), f"session {sid} out of order: {seqs}"
            assert sorted(set(seqs)) == by_session[sid]
        duplicates = len(got) - len({r.headers["webhook-id"] for r in got})
        print(
            f"\nwebhooks: {len(expected)} events, {len(got)} requests, {duplicates} duplicates,"
            f" kills={replicas[0].kills}, pg restarts={pg_cluster.restarts}"
        )
        assert replicas[0].kills == 1 and pg_cluster.restarts == 1
    finally:
        for r in replicas:
            r.stop()
