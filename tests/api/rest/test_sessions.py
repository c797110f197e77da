"""The session lifecycle over HTTP (in-process ASGI, real database)."""

from __future__ import annotations

import json

import httpx

USER = {"type": "message", "role": "user", "content": "hello"}
ASSISTANT = {"type": "message", "role": "assistant", "content": "hi"}


async def create(client: httpx.AsyncClient, **body: object) -> dict:
    response = await client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def test_walkthrough_create_items_events_fork_save_resume(client: httpx.AsyncClient) -> None:
    session = await create(client, metadata={"user": "alice"}, binding={"workspace": "a"})
    sid = session["session_id"]
    assert session["last_seq"] == 1 and session["counts"]["items"] == 0

    added = await client.post(f"/v1/sessions/{sid}/items", json={"items": [USER, ASSISTANT]})
    assert added.status_code == 201
    assert added.json()["first_seq"] == 2 and added.json()["last_seq"] == 2

    events = (await client.get(f"/v1/sessions/{sid}/events")).json()["data"]
    assert [e["type"] for e in events] == ["SESSION_CREATED", "MEMORY_ITEMS_APPENDED"]
    assert [e["seq"] for e in events] == [1, 2]

    child = await client.post(f"/v1/sessions/{sid}/fork", json={"at_seq": 1})
    assert child.status_code == 201
    assert child.json()["parent_session_id"] == sid and child.json()["counts"]["items"] == 0
    full_child = await client.post(f"/v1/sessions/{sid}/fork", json={})
    assert full_child.json()["counts"]["items"] == 2
    assert full_child.json()["forked_from_seq"] == 2

    saved = await client.post(f"/v1/sessions/{sid}/save")
    assert saved.status_code == 200 and saved.json()["snapshot_seq"] == 3

    resumed = await client.post(f"/v1/sessions/{sid}/resume", json={"binding": {"workspace": "a"}})
    assert resumed.status_code == 200
    assert resumed.json()["memory"]["items"] == [USER, ASSISTANT]
    mismatch = await client.post(f"/v1/sessions/{sid}/resume", json={"binding": {"workspace": "b"}})
    assert mismatch.status_code == 409 and mismatch.json()["code"] == "binding_mismatch"

    projection = (await client.get(f"/v1/sessions/{sid}/projection")).json()
    assert projection["equals_live"] is True and projection["memory"]["items"] == [USER, ASSISTANT]
    source_events = (await client.get(f"/v1/sessions/{sid}/events")).json()["data"]
    assert [e["type"] for e in source_events][-2:] == ["SESSION_SAVED", "SESSION_RESUMED"]


async def test_state_etag_save_if_match_and_restore(client: httpx.AsyncClient) -> None:
    sid = (await create(client))["session_id"]
    await client.post(f"/v1/sessions/{sid}/items", json={"items": [USER]})
    state = await client.get(f"/v1/sessions/{sid}/state")
    etag = state.headers["etag"]
    assert etag == f'"{state.json()["version"]}"'

    stale = await client.post(f"/v1/sessions/{sid}/save", headers={"If-Match": '"1"'})
    assert stale.status_code == 412 and stale.json()["code"] == "version_conflict"
    fresh = await client.post(f"/v1/sessions/{sid}/save", headers={"If-Match": etag})
    assert fresh.status_code == 200

    recovery = state.json()
    await client.post(f"/v1/sessions/{sid}/items", json={"items": [ASSISTANT, USER]})
    restored = await client.post(f"/v1/sessions/{sid}/restore", json={"state": recovery})
    assert restored.status_code == 200, restored.text
    assert restored.json()["memory"]["items"] == [USER]
    memory = (await client.get(f"/v1/sessions/{sid}/memory?full=true")).json()
    assert memory["items"] == [USER]
    assert [h["item"] for h in memory["history"]] == [USER, ASSISTANT, USER]
    bad = await client.post(f"/v1/sessions/{sid}/restore", json={"state": {"memory": "x"}})
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_state"


async def test_patch_merges_metadata_and_records_an_event(client: httpx.AsyncClient) -> None:
    sid = (await create(client, metadata={"a": 1, "b": {"c": 2}}))["session_id"]
    patched = await client.patch(
        f"/v1/sessions/{sid}", json={"metadata": {"a": None, "b": {"d": 3}, "e": "x"}}
    )
    assert patched.status_code == 200
    assert patched.json()["metadata"] == {"b": {"c": 2, "d": 3}, "e": "x"}
    events = (await client.get(f"/v1/sessions/{sid}/events?types=METADATA_UPDATED")).json()
    assert [e["type"] for e in events["data"]] == ["METADATA_UPDATED"]


async def test_delete_erases_and_then_404(client: httpx.AsyncClient) -> None:
    sid = (await create(client))["session_id"]
    assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
    for path in ("", "/events", "/state", "/memory"):
        gone = await client.get(f"/v1/sessions/{sid}{path}")
        assert gone.status_code == 404 and gone.json()["code"] == "session_not_found"
    assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 404


async def test_list_paginates_and_filters_by_metadata(client: httpx.AsyncClient) -> None:
    ids = [
        (await create(client, metadata={"team": "x" if i % 2 else "y"}))["session_id"]
        for i in range(5)
    ]
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/sessions", params=params)).json()
        seen += [s["session_id"] for s in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 5
    xs = (await client.get("/v1/sessions", params={"metadata.team": "x"})).json()["data"]
    assert sorted(s["session_id"] for s in xs) == sorted(ids[1::2])
    bad = await client.get("/v1/sessions", params={"cursor": "garbage"})
    assert bad.status_code == 422


async def test_events_filters_and_ndjson_export(client: httpx.AsyncClient) -> None:
    sid = (await create(client))["session_id"]
    for _ in range(3):
        await client.post(f"/v1/sessions/{sid}/items", json={"items": [USER]})
    page = (
        await client.get(f"/v1/sessions/{sid}/events", params={"after_seq": 1, "limit": 2})
    ).json()
    assert [e["seq"] for e in page["data"]] == [2, 3] and page["next_after_seq"] == 3
    typed = await client.get(f"/v1/sessions/{sid}/events", params={"types": "SESSION_CREATED,NOPE"})
    assert [e["seq"] for e in typed.json()["data"]] == [1]
    export = await client.get(
        f"/v1/sessions/{sid}/events", headers={"Accept": "application/x-ndjson"}
    )
    assert export.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in export.text.splitlines()]
    assert [e["seq"] for e in lines] == [1, 2, 3, 4]


async def test_expected_seq_on_items_gives_409_with_current_seq(client: httpx.AsyncClient) -> None:
    sid = (await create(client))["session_id"]
    ok = await client.post(f"/v1/sessions/{sid}/items", json={"items": [USER], "expected_seq": 1})
    assert ok.status_code == 201
    stale = await client.post(
        f"/v1/sessions/{sid}/items", json={"items": [USER], "expected_seq": 1}
    )
    assert stale.status_code == 409
    assert stale.json()["code"] == "seq_conflict" and stale.json()["current_seq"] == 2


async def test_multimodal_items_and_inline_size_limit(client: httpx.AsyncClient) -> None:
    sid = (await create(client))["session_id"]
    image = {"type": "image", "data": "aGVsbG8=", "media_type": "image/png"}
    link = {"type": "file", "url": "https://example.com/a.pdf", "media_type": "application/pdf"}
    msg = {
        "type": "message",
        "role": "user",
        "content": [{"type": "text", "text": "see"}, image, link],
    }
    assert (
        await client.post(f"/v1/sessions/{sid}/items", json={"items": [msg]})
    ).status_code == 201
    bad = {**image, "data": "not base64!"}
    response = await client.post(
        f"/v1/sessions/{sid}/items",
        json={"items": [{"type": "message", "role": "user", "content": [bad]}]},
    )
    assert response.status_code == 422 and response.json()["code"] == "invalid_items"


async def test_fork_errors(client: httpx.AsyncClient) -> None:
    sid = (await create(client))["session_id"]
    beyond = await client.post(f"/v1/sessions/{sid}/fork", json={"at_seq": 99})
    assert beyond.status_code == 422 and beyond.json()["code"] == "invalid_fork_point"
    await client.post(f"/v1/sessions/{sid}/fork", json={"session_id": "taken"})
    taken = await client.post(f"/v1/sessions/{sid}/fork", json={"session_id": "taken"})
    assert taken.status_code == 409 and taken.json()["code"] == "session_exists"


async def test_nul_characters_are_stored_as_replacement_characters(
    client: httpx.AsyncClient,
) -> None:
    """Regression (found by schemathesis on PostgreSQL): JSONB cannot hold U+0000, and an
    insert with one failed with a 500. Every persisted string now has NUL replaced."""
    created = await client.post("/v1/sessions", json={"metadata": {"k\u0000": "v\u0000"}})
    assert created.status_code == 201
    assert created.json()["metadata"] == {"k\ufffd": "v\ufffd"}
    sid = created.json()["session_id"]
    item = {"type": "message", "role": "user", "content": "a\u0000b"}
    assert (
        await client.post(f"/v1/sessions/{sid}/items", json={"items": [item]})
    ).status_code == 201
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()
    assert memory["items"][0]["content"] == "a\ufffdb"
    assert (await client.get(f"/v1/sessions/{sid}/projection")).json()["equals_live"]
