"""AG-UI shared state: a run's `state` is stored before it starts, the stream opens with
STATE_SNAPSHOT and sends a STATE_DELTA for each change the run makes; a connect opens with
the stored state and follows the deltas of the run in progress."""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from typing import Any

import httpx

from app.runtime.session.json_patch import apply_patch
from tests.api.ag_ui.test_connect import active_run, connect
from tests.api.ag_ui.test_routes import ag_ui, ledger, run_input, types, user


def add(path: str, value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}


def directive(*patches: list[dict[str, Any]]) -> str:
    return "".join(f"[state:{json.dumps(p)}]" for p in patches)


def client_state(events: list[dict[str, Any]]) -> Any:
    """What an AG-UI client holds after the stream: the snapshot, then every delta."""
    state: Any = None
    for event in events:
        if event["type"] == "STATE_SNAPSHOT":
            state = copy.deepcopy(event["snapshot"])
        elif event["type"] == "STATE_DELTA":
            state = apply_patch(state, event["delta"])
    return state


async def stored(client: httpx.AsyncClient, thread: str) -> Any:
    return (await client.get(f"/v1/sessions/{thread}/shared-state")).json()


async def test_state_is_stored_then_snapshot_and_deltas_build_the_stored_object(
    client: httpx.AsyncClient,
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    text = directive([add("/todos/-", "write")], [add("/todos/0", "plan"), add("/n", 2)])
    body = run_input(thread, [user(text)], runId="r1", state={"todos": [], "n": 1})
    events = await ag_ui(client, body)
    kinds = types(events)
    assert kinds[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"], kinds
    assert events[1]["snapshot"] == {"todos": [], "n": 1}
    assert kinds.count("STATE_DELTA") == 2 and kinds[-1] == "RUN_FINISHED"
    assert client_state(events) == await stored(client, thread)
    assert await stored(client, thread) == {"todos": ["plan", "write"], "n": 2}
    state_events = [e for e in await ledger(client, thread) if e["type"].startswith("STATE_")]
    assert [e["type"] for e in state_events] == ["STATE_SET", "STATE_PATCHED", "STATE_PATCHED"]
    assert state_events[0]["payload"] == {"state": {"todos": [], "n": 1}}
    # The same runId again streams the same run: the same snapshot, the same deltas.
    again = await ag_ui(client, body)
    assert [e for e in again if e["type"].startswith("STATE_")] == [
        e for e in events if e["type"].startswith("STATE_")
    ]


async def test_an_empty_state_keeps_the_stored_one_and_an_equal_one_writes_nothing(
    client: httpx.AsyncClient,
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    await ag_ui(client, run_input(thread, [user("one", "m1")], state={"k": "v"}))
    # A reloaded page sends {}: the thread keeps its state, and the stream says what it is.
    events = await ag_ui(client, run_input(thread, [user("two", "m2")], state={}))
    snapshots = [e["snapshot"] for e in events if e["type"] == "STATE_SNAPSHOT"]
    assert snapshots == [{"k": "v"}]
    await ag_ui(client, run_input(thread, [user("three", "m3")], state={"k": "v"}))
    kinds = [e["type"] for e in await ledger(client, thread)]
    assert kinds.count("STATE_SET") == 1
    assert await stored(client, thread) == {"k": "v"}


async def test_a_state_that_is_no_object_or_too_large_is_refused_before_the_run(
    client: httpx.AsyncClient,
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    headers = {"Accept": "text/event-stream"}
    for state, status in (([1, 2], 422), ("x", 422), ({"big": "x" * 70_000}, 413)):
        reply = await client.post(
            "/v1/ag-ui", json=run_input(thread, [user("hi")], state=state), headers=headers
        )
        assert reply.status_code == status, reply.text
        assert reply.headers["content-type"].startswith("application/problem+json")
    runs = await client.get(f"/v1/sessions/{thread}/runs")
    assert runs.status_code == 404 or runs.json()["data"] == []


async def test_a_bad_patch_of_the_model_is_a_tool_result_and_no_delta(
    client: httpx.AsyncClient,
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    text = directive([{"op": "remove", "path": "/missing"}])
    events = await ag_ui(client, run_input(thread, [user(text)], state={"a": 1}))
    kinds = types(events)
    assert "STATE_DELTA" not in kinds and "RUN_ERROR" not in kinds, kinds
    results = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert "invalid_patch" in results[0]["content"]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert client_state(events) == await stored(client, thread) == {"a": 1}


async def test_connect_sends_the_stored_state_and_the_deltas_of_a_run_in_progress(
    client: httpx.AsyncClient,
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    await client.post("/v1/sessions", json={"session_id": thread})
    await client.put(f"/v1/sessions/{thread}/shared-state", json={"n": 0})
    text = "[sleep:600] " + directive([{"op": "replace", "path": "/n", "value": 1}])
    running = asyncio.create_task(ag_ui(client, run_input(thread, [user(text)])))
    await active_run(client, thread)
    attached = [event for _, event in await connect(client, thread)]
    await running
    assert client_state(attached) == await stored(client, thread) == {"n": 1}
    # The snapshot is the state at the session's head when connect read it; the deltas are
    # those of the run after it: one, or none when the patch was already in the snapshot.
    snapshot = next(e for e in attached if e["type"] == "STATE_SNAPSHOT")["snapshot"]
    deltas = [e["delta"] for e in attached if e["type"] == "STATE_DELTA"]
    patch = [{"op": "replace", "path": "/n", "value": 1}]
    assert (snapshot, deltas) in (({"n": 0}, [patch]), ({"n": 1}, []))
