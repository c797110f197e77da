"""The session's shared state over REST: GET / PATCH (JSON Patch) / PUT .../shared-state,
its events, its limits, and how it travels with forks and restores."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

PATCH_JSON = {"Content-Type": "application/json-patch+json"}


async def new_session(client: httpx.AsyncClient) -> str:
    reply = await client.post("/v1/sessions", json={"session_id": f"s-{uuid.uuid4().hex[:10]}"})
    assert reply.status_code == 201, reply.text
    return reply.json()["session_id"]


def path(sid: str) -> str:
    return f"/v1/sessions/{sid}/shared-state"


async def types_of(client: httpx.AsyncClient, sid: str) -> list[str]:
    events = (await client.get(f"/v1/sessions/{sid}/events")).json()["data"]
    return [e["type"] for e in events]


def assert_problem(reply: httpx.Response, status: int, code: str) -> None:
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith("application/problem+json")
    assert reply.json()["code"] == code


async def test_a_new_session_shares_an_empty_object_with_its_version_as_etag(
    client: httpx.AsyncClient,
) -> None:
    sid = await new_session(client)
    reply = await client.get(path(sid))
    assert reply.status_code == 200 and reply.json() == {}
    assert reply.headers["etag"] == '"1"'


async def test_put_then_patch_are_ledger_events_and_get_returns_the_fold(
    client: httpx.AsyncClient,
) -> None:
    sid = await new_session(client)
    put = await client.put(path(sid), json={"todos": ["plan"], "title": "x"})
    assert put.status_code == 200 and put.json() == {"todos": ["plan"], "title": "x"}
    patch = [
        {"op": "add", "path": "/todos/-", "value": "build"},
        {"op": "remove", "path": "/title"},
        {"op": "add", "path": "/done", "value": None},
    ]
    patched = await client.patch(path(sid), json=patch, headers=PATCH_JSON)
    assert patched.status_code == 200, patched.text
    assert patched.json() == {"todos": ["plan", "build"], "done": None}
    # Plain JSON is accepted as well.
    plain = await client.patch(path(sid), json=[{"op": "replace", "path": "/done", "value": 1}])
    assert plain.status_code == 200 and plain.json()["done"] == 1
    assert (await client.get(path(sid))).json() == {"todos": ["plan", "build"], "done": 1}
    assert (await types_of(client, sid))[1:] == ["STATE_SET", "STATE_PATCHED", "STATE_PATCHED"]
    events = (await client.get(f"/v1/sessions/{sid}/events")).json()["data"]
    assert events[2]["payload"] == {"patch": patch}  # stored exactly, `null` included
    # The same state again, or a patch that changes nothing, writes nothing.
    await client.put(path(sid), json={"todos": ["plan", "build"], "done": 1})
    await client.patch(path(sid), json=[{"op": "test", "path": "/done", "value": 1}])
    assert len(await types_of(client, sid)) == 4


async def test_bad_patches_are_422_problems_and_change_nothing(client: httpx.AsyncClient) -> None:
    sid = await new_session(client)
    await client.put(path(sid), json={"a": 1})
    for patch in (
        [{"op": "test", "path": "/a", "value": 2}],  # a failing test
        [{"op": "remove", "path": "/missing"}],  # a missing path
        [{"op": "add", "path": "/x/y", "value": 1}],
        [{"op": "replace", "path": "", "value": [1]}],  # the state must stay an object
    ):
        reply = await client.patch(path(sid), json=patch, headers=PATCH_JSON)
        assert_problem(reply, 422, "invalid_patch")
    for body in ([{"op": "frobnicate", "path": "/a"}], {"op": "add"}, "x", [{"path": "/a"}]):
        reply = await client.patch(path(sid), json=body, headers=PATCH_JSON)
        assert reply.status_code == 422, reply.text
        assert reply.headers["content-type"].startswith("application/problem+json")
    bad_put = await client.put(path(sid), json=[1, 2])
    assert bad_put.status_code == 422
    assert (await client.get(path(sid))).json() == {"a": 1}


async def test_if_match_guards_writes_like_other_session_writes(
    client: httpx.AsyncClient,
) -> None:
    sid = await new_session(client)
    etag = (await client.get(path(sid))).headers["etag"]
    ok = await client.put(path(sid), json={"a": 1}, headers={"If-Match": etag})
    assert ok.status_code == 200 and ok.headers["etag"] != etag
    stale = await client.patch(
        path(sid), json=[{"op": "add", "path": "/b", "value": 2}], headers={"If-Match": etag}
    )
    assert_problem(stale, 412, "version_conflict")
    assert (await client.get(path(sid))).json() == {"a": 1}


async def test_state_over_its_limit_is_413(client: httpx.AsyncClient) -> None:
    sid = await new_session(client)
    big = "x" * 70_000  # the default ASR_MAX_STATE_BYTES is 65536
    assert_problem(await client.put(path(sid), json={"big": big}), 413, "payload_too_large")
    patch = [{"op": "add", "path": "/big", "value": big}]
    assert_problem(await client.patch(path(sid), json=patch), 413, "payload_too_large")
    assert (await client.get(path(sid))).json() == {}


async def test_concurrent_patches_all_apply(client: httpx.AsyncClient) -> None:
    sid = await new_session(client)
    await client.put(path(sid), json={"log": []})

    async def add(n: int) -> int:
        patch = [{"op": "add", "path": "/log/-", "value": n}]
        return (await client.patch(path(sid), json=patch)).status_code

    codes = await asyncio.gather(*(add(n) for n in range(8)))
    assert codes == [200] * 8
    assert sorted((await client.get(path(sid))).json()["log"]) == list(range(8))


async def test_a_fork_carries_the_state_and_then_goes_its_own_way(
    client: httpx.AsyncClient,
) -> None:
    sid = await new_session(client)
    await client.put(path(sid), json={"plan": ["a"]})
    fork = await client.post(f"/v1/sessions/{sid}/fork", json={})
    assert fork.status_code == 201, fork.text
    child = fork.json()["session_id"]
    assert (await client.get(path(child))).json() == {"plan": ["a"]}
    await client.patch(path(sid), json=[{"op": "add", "path": "/plan/-", "value": "p"}])
    await client.patch(path(child), json=[{"op": "add", "path": "/plan/-", "value": "c"}])
    assert (await client.get(path(sid))).json() == {"plan": ["a", "p"]}
    assert (await client.get(path(child))).json() == {"plan": ["a", "c"]}
    # A fork before the state was set has none.
    early = await client.post(f"/v1/sessions/{sid}/fork", json={"at_seq": 1})
    assert (await client.get(path(early.json()["session_id"]))).json() == {}


async def test_the_recovery_object_carries_the_state_and_restore_installs_it(
    client: httpx.AsyncClient,
) -> None:
    sid = await new_session(client)
    assert (await client.get(f"/v1/sessions/{sid}/state")).json()["shared_state"] == {}
    await client.put(path(sid), json={"step": 3})
    recovery = (await client.get(f"/v1/sessions/{sid}/state")).json()
    assert recovery["shared_state"] == {"step": 3}
    other = await new_session(client)
    restored = await client.post(f"/v1/sessions/{other}/restore", json={"state": recovery})
    assert restored.status_code == 200, restored.text
    assert (await client.get(path(other))).json() == {"step": 3}
    # A recovery object without one (older clients) leaves the state as it is.
    del recovery["shared_state"]
    await client.put(path(other), json={"kept": True})
    await client.post(f"/v1/sessions/{other}/restore", json={"state": recovery})
    assert (await client.get(path(other))).json() == {"kept": True}
    # Restoring a state over the limit is refused like any other write of it.
    recovery["shared_state"] = {"big": "x" * 70_000}
    big = await client.post(f"/v1/sessions/{other}/restore", json={"state": recovery})
    assert_problem(big, 413, "payload_too_large")


async def test_unknown_session_is_404(client: httpx.AsyncClient) -> None:
    assert_problem(await client.get(path("nope-" + uuid.uuid4().hex)), 404, "session_not_found")
    reply = await client.patch(path("nope-" + uuid.uuid4().hex), json=[])
    assert_problem(reply, 404, "session_not_found")


async def test_the_model_changes_the_state_with_the_directive_and_a_bad_patch_is_a_tool_error(
    client: httpx.AsyncClient,
) -> None:
    sid = await new_session(client)
    await client.put(path(sid), json={"todos": ["plan"]})

    async def run(text: str) -> dict[str, Any]:
        reply = await client.post(f"/v1/sessions/{sid}/runs", json={"input": text, "mode": "wait"})
        assert reply.status_code in (200, 201), reply.text
        return reply.json()

    done = await run(
        '[state:[{"op": "add", "path": "/todos/-", "value": "ship"}]]'
        '[state:[{"op": "replace", "path": "/todos/0", "value": "planned"}]]'
    )
    assert done["stop_reason"] == "COMPLETED", done
    assert (await client.get(path(sid))).json() == {"todos": ["planned", "ship"]}
    events = (await client.get(f"/v1/sessions/{sid}/events")).json()["data"]
    patched = [e for e in events if e["type"] == "STATE_PATCHED"]
    assert len(patched) == 2 and all(e["run_id"] == done["run_id"] for e in patched)
    # A patch that does not apply: a tool error the model sees; the run goes on (even with
    # the default on_tool_error "stop") and the state is unchanged.
    failed = await run('[state:[{"op": "test", "path": "/todos/0", "value": "nope"}]]')
    assert failed["stop_reason"] == "COMPLETED", failed
    assert "invalid_patch" in failed["output"]
    events = (await client.get(f"/v1/sessions/{sid}/events")).json()["data"]
    result = [e for e in events if e["type"] == "TOOL_RESULT"][-1]
    assert result["payload"]["is_error"] is True
    assert (await client.get(path(sid))).json() == {"todos": ["planned", "ship"]}
