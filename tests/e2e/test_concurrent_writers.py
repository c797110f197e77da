"""Concurrent writers of every kind never fail for contention (a model test, black-box).

Randomized, seeded and bounded: writers of every kind — metadata patches (no If-Match),
items, saves, forks, compactions, run starts and cancels, approvals — race against one hot
session and against a few others, through real `asr serve` processes: two replicas on one
PostgreSQL (each request to either, at random), one on SQLite (it has one process). Then,
for every session, checked from outside:

- the ledger is gapless (seq 1..N);
- nothing acknowledged is missing: each write's events are in the ledger, each patch's key
  is in the metadata, each acknowledged fork and run exists;
- the fold of the whole ledger equals the live state (`/projection`);
- no request without a precondition was refused for contention: every 409/412 is one with
  a reason of its own (a run already active, calls pending, an approval already decided).

A write decided on the session's state that loses to another writer is decided again under
the session's hold (`SessionStore.hold`); the metadata patch merges under the row lock.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from app.store.stores import Stores
from tests.conftest import Server, TenantKey, make_tenant, start_server, stop_server

SEED = 20261203
HOT_OPERATIONS = 120  # against the one hot session
SPREAD_OPERATIONS = 60  # against the others, spread at random
OTHER_SESSIONS = 3
CONCURRENCY = 16
# 409s with a reason of their own (not contention): they may happen in a fair race.
OWN_REASONS = {"run_in_progress", "tool_calls_pending", "nothing_pending", "run_not_active"}
KINDS = ("patch", "items", "save", "fork", "compact", "run", "cancel", "approval")


@pytest.fixture(scope="module")
def replicas(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    """Two replicas on PostgreSQL, one on SQLite (one process serves a SQLite file)."""
    logs = tmp_path_factory.mktemp("writers")
    count = 2 if database_url.startswith("postgresql") else 1
    env = {"ASR_MAX_RUNS_PER_MINUTE": "100000", "ASR_MAX_LIVE_RUNS_PER_TENANT": "1000"}
    servers: list[Server] = []
    try:
        for name in "ab"[:count]:
            servers.append(
                start_server(database_url, logs / f"{name}.log", ready_seconds=120, **env)
            )
        yield servers
    finally:
        for server in servers:
            stop_server(server)
    for server in servers:
        assert "Traceback" not in server.log(), server.log()[-4000:]


@dataclass
class Ledger:
    """What the test was told was written, per session."""

    patched_keys: set[str] = field(default_factory=set)
    acknowledged: Counter[str] = field(default_factory=Counter)  # event type -> writes
    item_markers: set[str] = field(default_factory=set)
    forks: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    refusals: Counter[tuple[int, str]] = field(default_factory=Counter)


class Writers:
    def __init__(self, clients: list[httpx.AsyncClient], rng: random.Random) -> None:
        self.clients = clients
        self.rng = rng
        self.ledgers: dict[str, Ledger] = {}
        self.counter = 0

    def client(self) -> httpx.AsyncClient:
        return self.rng.choice(self.clients)

    async def create(self) -> str:
        created = await self.client().post("/v1/sessions", json={})
        assert created.status_code == 201, created.text
        sid = created.json()["session_id"]
        self.ledgers[sid] = Ledger()
        return sid

    async def do(self, kind: str, sid: str) -> None:
        self.counter += 1
        n = self.counter
        ledger = self.ledgers[sid]
        base = f"/v1/sessions/{sid}"
        http = self.client()
        if kind == "patch":
            key = f"k{n}"
            r = await http.patch(base, json={"metadata": {key: n}})
            if r.status_code == 200:
                ledger.patched_keys.add(key)
                ledger.acknowledged["METADATA_UPDATED"] += 1
        elif kind == "items":
            marker = f"item-{n}"
            item = {"type": "message", "role": "user", "content": marker}
            r = await http.post(f"{base}/items", json={"items": [item]})
            if r.status_code in (200, 201):
                ledger.item_markers.add(marker)
                ledger.acknowledged["MEMORY_ITEMS_APPENDED"] += 1
        elif kind == "save":
            r = await http.post(f"{base}/save")
            if r.status_code == 200:
                ledger.acknowledged["SESSION_SAVED"] += 1
        elif kind == "fork":
            r = await http.post(f"{base}/fork", json={})
            if r.status_code == 201:
                ledger.forks.append(r.json()["session_id"])
        elif kind == "compact":
            r = await http.post(f"{base}/compact", json={"strategy": "truncate", "keep_last": 4})
        elif kind == "run":
            text = self.rng.choice(["hello", "[sleep:50] slow", '[tool:echo {"text": "x"}]'])
            body: dict[str, Any] = {"input": text, "mode": "wait"}
            if text.startswith("[tool"):
                body["approval_required"] = ["echo"]
            r = await http.post(f"{base}/runs", json=body)
            if r.status_code == 200:
                ledger.runs.append(r.json()["run_id"])
        elif kind == "cancel":
            if not ledger.runs:
                return
            run_id = self.rng.choice(ledger.runs)
            r = await http.post(f"{base}/runs/{run_id}/cancel")
        else:  # approval: answer whatever the session has pending, if anything
            pending = (await http.get(f"{base}/runs")).json()["data"]
            calls = [c for run in pending for c in run.get("pending", [])]
            if not calls:
                return
            call = self.rng.choice(calls)
            decision = self.rng.choice(["approve", "reject"])
            body = {"call_id": call["call_id"], "decision": decision}
            r = await http.post(f"{base}/approvals", json=body)
            if r.status_code == 200 and r.json().get("run"):
                ledger.runs.append(r.json()["run"]["run_id"])
        if r.status_code >= 400:
            ledger.refusals[(r.status_code, _code(r))] += 1
        assert r.status_code < 500, r.text


def _code(response: httpx.Response) -> str:
    try:
        return str(response.json().get("code"))
    except ValueError:
        return ""


async def _events(http: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after = 0
    for _ in range(1000):  # bounded: 1000 pages of 500 is far past any ledger here
        page = (
            await http.get(f"/v1/sessions/{sid}/events", params={"after_seq": after, "limit": 500})
        ).json()
        events.extend(page["data"])
        if page["next_after_seq"] is None:
            return events
        after = page["next_after_seq"]
    raise AssertionError("the ledger never ended")


async def _check(http: httpx.AsyncClient, sid: str, ledger: Ledger) -> None:
    events = await _events(http, sid)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "gap in the ledger"
    types = Counter(e["type"] for e in events)
    for event_type, count in ledger.acknowledged.items():
        assert types[event_type] >= count, (event_type, types[event_type], count)
    assert types["METADATA_UPDATED"] == ledger.acknowledged["METADATA_UPDATED"]
    session = (await http.get(f"/v1/sessions/{sid}")).json()
    assert ledger.patched_keys <= set(session["metadata"]), "a patch was lost"
    written = {
        item.get("content")
        for e in events
        if e["type"] == "MEMORY_ITEMS_APPENDED"
        for item in e["payload"]["items"]
    }
    assert ledger.item_markers <= written, "acknowledged items are missing"
    projection = (await http.get(f"/v1/sessions/{sid}/projection")).json()
    assert projection["equals_live"], projection
    assert projection["seq"] == len(events)
    for fork in ledger.forks:
        assert (await http.get(f"/v1/sessions/{fork}")).status_code == 200
        child = (await http.get(f"/v1/sessions/{fork}/projection")).json()
        assert child["equals_live"], child
    for run_id in ledger.runs:
        assert (await http.get(f"/v1/sessions/{sid}/runs/{run_id}")).status_code == 200


async def _settle(http: httpx.AsyncClient, sids: list[str]) -> None:
    """Wait (bounded) for every run to end, so the ledgers stop moving before the checks."""
    for _ in range(300):
        active = [
            sid
            for sid in sids
            if (await http.get(f"/v1/sessions/{sid}")).json().get("active_run_id")
        ]
        if not active:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"runs still active after 30 s: {active}")


async def test_concurrent_writers_never_fail_for_contention(
    replicas: list[Server], store: Stores
) -> None:
    rng = random.Random(SEED)
    tenant: TenantKey = await make_tenant(store)
    clients = [
        httpx.AsyncClient(base_url=s.base_url, headers=tenant.headers, timeout=60) for s in replicas
    ]
    try:
        writers = Writers(clients, rng)
        hot = await writers.create()
        others = [await writers.create() for _ in range(OTHER_SESSIONS)]
        plan = [(rng.choice(KINDS), hot) for _ in range(HOT_OPERATIONS)]
        plan += [(rng.choice(KINDS), rng.choice(others)) for _ in range(SPREAD_OPERATIONS)]
        plan += [("patch", hot) for _ in range(20)]  # a burst of patches at least
        rng.shuffle(plan)
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(kind: str, sid: str) -> None:
            async with gate:
                await writers.do(kind, sid)

        async with asyncio.timeout(240):
            await asyncio.gather(*(one(kind, sid) for kind, sid in plan))
            await _settle(clients[0], [hot, *others])
            for sid in [hot, *others]:
                await _check(clients[-1], sid, writers.ledgers[sid])
        refusals = Counter[tuple[int, str]]()
        for ledger in writers.ledgers.values():
            refusals.update(ledger.refusals)
        contention = {k: v for k, v in refusals.items() if k[1] not in OWN_REASONS}
        assert not contention, f"refused without a reason of their own: {contention}"
    finally:
        for client in clients:
            await client.aclose()


async def test_concurrent_patches_without_if_match_all_land(
    replicas: list[Server], store: Stores
) -> None:
    """40 PATCHes without If-Match, split over the replicas: 40 x 200, 40 METADATA_UPDATED,
    every key present."""
    tenant = await make_tenant(store)
    clients = [
        httpx.AsyncClient(base_url=s.base_url, headers=tenant.headers, timeout=60) for s in replicas
    ]
    try:
        sid = (await clients[0].post("/v1/sessions", json={})).json()["session_id"]
        async with asyncio.timeout(120):
            answers = await asyncio.gather(
                *(
                    clients[i % len(clients)].patch(
                        f"/v1/sessions/{sid}", json={"metadata": {f"key{i}": i}}
                    )
                    for i in range(40)
                )
            )
        assert [a.status_code for a in answers] == [200] * 40, [a.text for a in answers]
        events = await _events(clients[-1], sid)
        assert sum(e["type"] == "METADATA_UPDATED" for e in events) == 40
        metadata = (await clients[-1].get(f"/v1/sessions/{sid}")).json()["metadata"]
        assert metadata == {f"key{i}": i for i in range(40)}
    finally:
        for client in clients:
            await client.aclose()


async def test_if_match_mismatch_names_real_versions(replicas: list[Server], store: Stores) -> None:
    """A real precondition still fails (412), and its problem names the versions compared."""
    tenant = await make_tenant(store)
    async with httpx.AsyncClient(
        base_url=replicas[-1].base_url, headers=tenant.headers, timeout=30
    ) as http:
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        version = (await http.get(f"/v1/sessions/{sid}/state")).headers["etag"].strip('W/"')
        await http.patch(f"/v1/sessions/{sid}", json={"metadata": {"a": 1}})
        stale = await http.post(f"/v1/sessions/{sid}/save", headers={"If-Match": version})
        assert stale.status_code == 412, stale.text
        problem = stale.json()
        assert problem["code"] == "version_conflict"
        assert problem["expected_version"] == int(version)
        assert problem["current_version"] > int(version)
