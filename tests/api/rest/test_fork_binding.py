"""Issue 10: fork checks the workspace binding as resume does. The child keeps the parent's
binding; a different one is 409 `binding_mismatch` (and nothing is created) unless the
request asks to rebind."""

from __future__ import annotations

import httpx

REPO_A = {"workspace": "repo-a"}
REPO_B = {"workspace": "repo-b"}


async def sessions_of(client: httpx.AsyncClient) -> list[str]:
    return [s["session_id"] for s in (await client.get("/v1/sessions")).json()["data"]]


async def test_fork_keeps_the_binding_refuses_another_and_rebinds_when_asked(
    client: httpx.AsyncClient,
) -> None:
    sid = (await client.post("/v1/sessions", json={"binding": REPO_A})).json()["session_id"]

    kept = await client.post(f"/v1/sessions/{sid}/fork", json={})
    assert kept.status_code == 201 and kept.json()["binding"] == REPO_A
    same = await client.post(f"/v1/sessions/{sid}/fork", json={"binding": REPO_A})
    assert same.status_code == 201 and same.json()["binding"] == REPO_A
    before = await sessions_of(client)
    source_events = (await client.get(f"/v1/sessions/{sid}/events")).json()["data"]

    refused = await client.post(f"/v1/sessions/{sid}/fork", json={"binding": REPO_B})
    assert refused.status_code == 409
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["code"] == "binding_mismatch"
    assert refused.json()["stored_binding"] == REPO_A
    named = await client.post(
        f"/v1/sessions/{sid}/fork", json={"binding": REPO_B, "session_id": "must-not-exist"}
    )
    assert named.status_code == 409
    assert (await client.get("/v1/sessions/must-not-exist")).status_code == 404
    # Nothing changed: no child, and the source's ledger is as it was.
    assert await sessions_of(client) == before
    assert (await client.get(f"/v1/sessions/{sid}/events")).json()["data"] == source_events

    rebound = await client.post(
        f"/v1/sessions/{sid}/fork", json={"binding": REPO_B, "rebind": True}
    )
    assert rebound.status_code == 201
    child = rebound.json()
    assert child["binding"] == REPO_B and child["parent_session_id"] == sid
    forked = (await client.get(f"/v1/sessions/{child['session_id']}/events")).json()["data"][-1]
    assert forked["type"] == "SESSION_FORKED" and forked["payload"]["rebound_to"] == REPO_B
    # The source keeps its binding; resuming it with the child's binding is still refused.
    resumed = await client.post(f"/v1/sessions/{sid}/resume", json={"binding": REPO_B})
    assert resumed.status_code == 409 and resumed.json()["code"] == "binding_mismatch"
    resumed_child = await client.post(
        f"/v1/sessions/{child['session_id']}/resume", json={"binding": REPO_B}
    )
    assert resumed_child.status_code == 200


async def test_rebind_without_a_binding_is_422(client: httpx.AsyncClient) -> None:
    sid = (await client.post("/v1/sessions", json={"binding": REPO_A})).json()["session_id"]
    before = await sessions_of(client)
    response = await client.post(f"/v1/sessions/{sid}/fork", json={"rebind": True})
    assert response.status_code == 422 and response.json()["code"] == "invalid_request"
    assert await sessions_of(client) == before


async def test_unbound_session_forks_with_an_explicit_rebind_only(
    client: httpx.AsyncClient,
) -> None:
    sid = (await client.post("/v1/sessions", json={})).json()["session_id"]
    refused = await client.post(f"/v1/sessions/{sid}/fork", json={"binding": REPO_A})
    assert refused.status_code == 409 and refused.json()["stored_binding"] == {}
    bound = await client.post(f"/v1/sessions/{sid}/fork", json={"binding": REPO_A, "rebind": True})
    assert bound.status_code == 201 and bound.json()["binding"] == REPO_A
