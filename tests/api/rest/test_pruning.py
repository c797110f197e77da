"""Pruning a session's ledger: the prefix up to a snapshot becomes one HISTORY_PRUNED event
at that snapshot's seq, so `seq` stays gapless from there and a reader of an older range
meets the marker first. The pruned session still loads, resumes, forks, runs and projects
(the projection starts from the snapshot kept at the marker), and a prune never reaches a
pending client-tool call.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from app.assembly import runtime_over
from app.services import services_of
from app.store.stores import Stores

USER = {"type": "message", "role": "user", "content": "hello"}


async def _append(client: httpx.AsyncClient, sid: str, n: int) -> None:
    for i in range(n):
        item = {**USER, "content": f"m{i}"}
        r = await client.post(f"/v1/sessions/{sid}/items", json={"items": [item]})
        assert r.status_code == 201, r.text


async def _events(client: httpx.AsyncClient, sid: str, after: int = 0) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/sessions/{sid}/events", params={"after_seq": after, "limit": 1000})
    assert r.status_code == 200, r.text
    return list(r.json()["data"])


async def _save(client: httpx.AsyncClient, sid: str) -> int:
    r = await client.post(f"/v1/sessions/{sid}/save", json={})
    assert r.status_code == 200, r.text
    return int((await client.get(f"/v1/sessions/{sid}")).json()["last_seq"])


async def test_a_pruned_ledger_starts_with_its_marker_and_keeps_working(
    client: httpx.AsyncClient, app: object, tenant: Any
) -> None:
    sid = (await client.post("/v1/sessions", json={})).json()["session_id"]
    await _append(client, sid, 6)
    cut = await _save(client, sid)
    await _append(client, sid, 3)
    before = (await client.get(f"/v1/sessions/{sid}/memory")).json()
    last = int((await client.get(f"/v1/sessions/{sid}")).json()["last_seq"])
    runtime = services_of(app).runtime

    dry = await runtime.prune(tenant.tenant_id, sid, dry_run=True)
    assert (dry.cut_seq, dry.events_removed, dry.reason) == (cut, cut, "would_prune")
    assert len(await _events(client, sid)) == last

    outcome = await runtime.prune(tenant.tenant_id, sid)
    assert (outcome.cut_seq, outcome.events_removed, outcome.reason) == (cut, cut, "pruned")
    events = await _events(client, sid)
    assert [e["seq"] for e in events] == list(range(cut, last + 1))
    marker = events[0]
    assert marker["type"] == "HISTORY_PRUNED"
    assert marker["payload"] == {
        "first_seq": 1, "last_seq": cut, "snapshot_seq": cut, "events_pruned": cut
    }  # fmt: skip
    # A reader resuming inside the pruned range meets the marker, then the tail.
    assert [e["seq"] for e in await _events(client, sid, after=2)][:2] == [cut, cut + 1]
    # Nothing more to prune: a second pass leaves the ledger as it is.
    again = await runtime.prune(tenant.tenant_id, sid)
    assert again.cut_seq is None
    assert len(await _events(client, sid)) == last - cut + 1

    runtime.forget(tenant.tenant_id, sid)  # a cold load: snapshot + tail
    assert (await client.get(f"/v1/sessions/{sid}/memory")).json() == before
    projection = (await client.get(f"/v1/sessions/{sid}/projection")).json()
    assert projection["equals_live"] is True, projection
    assert (await client.post(f"/v1/sessions/{sid}/resume", json={})).status_code == 200

    refused = await client.post(f"/v1/sessions/{sid}/fork", json={"at_seq": cut - 1})
    assert refused.status_code == 422
    assert refused.json()["code"] == "invalid_fork_point"
    forked = await client.post(f"/v1/sessions/{sid}/fork", json={"at_seq": cut + 1})
    assert forked.status_code == 201, forked.text
    child = forked.json()["session_id"]
    child_events = await _events(client, child)
    assert child_events[0]["type"] == "HISTORY_PRUNED"
    assert (await client.get(f"/v1/sessions/{child}/projection")).json()["equals_live"] is True

    run = await client.post(f"/v1/sessions/{sid}/runs", json={"input": "after the prune"})
    assert run.status_code == 200, run.text
    assert (await client.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"] is True
    # A second prune, at a later snapshot, carries the first marker's range and count on.
    await _append(client, sid, 2)
    later = await _save(client, sid)
    second = await runtime.prune(tenant.tenant_id, sid)
    assert second.cut_seq == later
    head = (await _events(client, sid))[0]
    assert head["seq"] == later and head["payload"]["first_seq"] == 1
    assert head["payload"]["events_pruned"] == later  # every event of 1..later, once
    assert (await client.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"] is True


async def test_a_prune_stops_before_a_pending_client_tool_call(
    client: httpx.AsyncClient, app: object, tenant: Any
) -> None:
    sid = (await client.post("/v1/sessions", json={})).json()["session_id"]
    await _append(client, sid, 3)
    early = await _save(client, sid)
    asked = await client.post(
        f"/v1/sessions/{sid}/runs",
        json={"input": '[tool:pick {"x": 1}]', "client_tools": [{"name": "pick"}]},
    )
    assert asked.status_code == 200, asked.text
    assert asked.json()["stop_reason"] == "NEEDS_USER_INPUT"
    await _save(client, sid)  # a snapshot whose state has the pending call
    runtime = services_of(app).runtime
    outcome = await runtime.prune(tenant.tenant_id, sid)
    assert outcome.cut_seq == early
    events = await _events(client, sid)
    calls = [e for e in events if e["type"] == "TOOL_CALL"]
    assert calls, "the pending call's TOOL_CALL stays"
    call_id = calls[-1]["payload"]["call_id"]
    answered = await client.post(
        f"/v1/sessions/{sid}/tool-outputs", json={"outputs": [{"call_id": call_id, "output": "7"}]}
    )
    assert answered.status_code in (200, 202), answered.text
    assert (await client.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"] is True


async def test_a_replica_whose_cached_state_predates_a_prune_loads_from_the_snapshot(
    store: Stores, tenant: Any
) -> None:
    """Replica A cached the session at an early seq; replica B wrote more, saved and pruned
    past it. A's next load must not fold the tail on its stale state across the gap."""
    a, b = runtime_over(store), runtime_over(store)
    tid = tenant.tenant_id
    await a.create(tid, session_id="cached", metadata={}, agent={}, binding={})
    early = await a.load(tid, "cached")
    for i in range(4):
        await b.append_items(tid, "cached", [{**USER, "content": f"b{i}"}])
    await b.save(tid, "cached")
    await b.append_items(tid, "cached", [{**USER, "content": "tail"}])
    outcome = await b.prune(tid, "cached")
    assert outcome.cut_seq is not None and outcome.cut_seq > early.state.seq
    fresh = await b.load(tid, "cached")
    assert a.cached(tid, "cached") is not None  # A still holds its early state
    loaded = await a.load(tid, "cached")
    assert loaded.state.items == fresh.state.items
    assert [i["content"] for i in loaded.state.items] == ["b0", "b1", "b2", "b3", "tail"]
    at = await a.state_at(tid, "cached", loaded.session.last_seq, record=loaded.session)
    assert at.items == fresh.state.items


async def test_a_prune_stops_before_a_pending_approval_and_an_active_run(
    client: httpx.AsyncClient, app: object, tenant: Any
) -> None:
    runtime = services_of(app).runtime
    sid = (await client.post("/v1/sessions", json={})).json()["session_id"]
    await _append(client, sid, 3)
    early = await _save(client, sid)
    asked = await client.post(
        f"/v1/sessions/{sid}/runs",
        json={"input": '[tool:echo {"text": "t"}]', "approval_required": ["echo"]},
    )
    assert asked.json()["stop_reason"] == "BLOCKED_BY_APPROVAL", asked.text
    await _save(client, sid)
    assert (await runtime.prune(tenant.tenant_id, sid)).cut_seq == early
    requested = [e for e in await _events(client, sid) if e["type"] == "APPROVAL_REQUESTED"]
    assert requested, "the pending approval's request stays"
    call_id = requested[-1]["payload"]["call_id"]
    decided = await client.post(
        f"/v1/sessions/{sid}/approvals", json={"call_id": call_id, "decision": "approve"}
    )
    assert decided.status_code in (200, 202), decided.text

    # A run in progress: a snapshot written while it runs is not a cut point.
    other = (await client.post("/v1/sessions", json={})).json()["session_id"]
    await _append(client, other, 3)
    before_run = await _save(client, other)
    started = await client.post(
        f"/v1/sessions/{other}/runs", json={"input": "[sleep:1500]", "mode": "background"}
    )
    assert started.status_code == 202, started.text
    mid = await client.post(f"/v1/sessions/{other}/save", json={})
    assert mid.status_code == 200, mid.text  # a newer snapshot, inside the run
    for _ in range(100):  # "busy": the run's own write held the session row; try again
        outcome = await runtime.prune(tenant.tenant_id, other)
        if outcome.reason != "busy":
            break
        await asyncio.sleep(0.01)
    assert outcome.cut_seq == before_run, outcome
    run_path = started.headers["Location"]
    for _ in range(100):
        if (await client.get(run_path)).json()["status"] not in ("queued", "running"):
            break
        await asyncio.sleep(0.05)
    assert (await client.get(run_path)).json()["status"] == "finished"
    assert (await client.get(f"/v1/sessions/{other}/projection")).json()["equals_live"] is True
