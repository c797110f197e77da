"""Black-box tests against a real uvicorn server on a loopback port.

Covers: 50 concurrent item appends on one session (gapless, nothing lost); R3 (32 writers x
50 optimistic appends with expected_seq and retry on 409); the tenant sweep over every
session route taken from the live OpenAPI schema (R16); and no 500 on malformed input.
"""

from __future__ import annotations

import asyncio
import random
import re
import time

import httpx
import pytest

from app.store.stores import Stores
from tests.conftest import Server, TenantKey, make_tenant

USER = {"type": "message", "role": "user", "content": "x"}


@pytest.fixture
async def http(server: Server, tenant: TenantKey):
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(
        base_url=server.base_url, headers=tenant.headers, timeout=30, limits=limits
    ) as c:
        yield c


async def new_session(http: httpx.AsyncClient) -> str:
    response = await http.post("/v1/sessions", json={})
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


async def test_50_concurrent_appends_leave_a_gapless_ledger(http: httpx.AsyncClient) -> None:
    sid = await new_session(http)

    async def append(i: int) -> httpx.Response:
        item = {"type": "message", "role": "user", "content": f"item-{i}"}
        return await http.post(f"/v1/sessions/{sid}/items", json={"items": [item]})

    responses = await asyncio.gather(*(append(i) for i in range(50)))
    assert [r.status_code for r in responses] == [201] * 50
    events = (await http.get(f"/v1/sessions/{sid}/events", params={"limit": 1000})).json()["data"]
    assert [e["seq"] for e in events] == list(range(1, 52))
    contents = sorted(e["payload"]["items"][0]["content"] for e in events[1:])
    assert contents == sorted(f"item-{i}" for i in range(50))
    memory = (await http.get(f"/v1/sessions/{sid}/memory")).json()
    assert len(memory["items"]) == 50


async def test_r3_optimistic_writers_with_expected_seq(
    http: httpx.AsyncClient, server: Server
) -> None:
    sid = await new_session(http)
    conflicts = 0

    async def writer(w: int) -> None:
        nonlocal conflicts
        rng = random.Random(w)
        head = (await http.get(f"/v1/sessions/{sid}")).json()["last_seq"]
        for n in range(50):
            item = {"type": "message", "role": "user", "content": f"{w}-{n}"}
            # Bounded by attempts, not by a clock: how long 32 writers take is a benchmark's
            # question; a writer that never gets through is this test's failure.
            for attempt in range(200):
                response = await http.post(
                    f"/v1/sessions/{sid}/items", json={"items": [item], "expected_seq": head}
                )
                if response.status_code == 201:
                    head = response.json()["last_seq"]
                    break
                assert response.status_code == 409, response.text
                problem = response.json()
                assert problem["code"] == "seq_conflict"
                head = problem["current_seq"]  # the 409 says where the session is now
                conflicts += 1
                # Exponential backoff with full jitter, as any optimistic writer should, so
                # that 32 writers do not retry in lockstep.
                await asyncio.sleep(rng.uniform(0, min(0.5, 0.01 * 2**attempt)))
            else:
                raise AssertionError(f"writer {w} never appended item {n} in 200 attempts")

    started = time.monotonic()
    await asyncio.gather(*(writer(w) for w in range(32)))
    print(
        f"R3: 1600 appends, 32 writers: {time.monotonic() - started:.1f} s, {conflicts} conflicts"
    )
    events = []
    after = 0
    while True:
        page = (
            await http.get(f"/v1/sessions/{sid}/events", params={"after_seq": after, "limit": 1000})
        ).json()
        events += page["data"]
        if page["next_after_seq"] is None:
            break
        after = page["next_after_seq"]
    assert [e["seq"] for e in events] == list(range(1, 1602))
    assert len({e["payload"]["items"][0]["content"] for e in events[1:]}) == 1600
    log = server.log()
    assert "database is locked" not in log and "25P02" not in log and " 500 " not in log


def session_routes(schema: dict) -> list[tuple[str, str]]:
    routes = []
    for path, methods in schema["paths"].items():
        if "{session_id}" in path:
            routes.extend((method.upper(), path) for method in methods)
    return routes


VALID_BODIES = {
    "/items": {"items": [USER]},
    "/restore": {"state": {"memory": {"items": [], "summary": None}}},
    "": {"metadata": {"k": "v"}},  # PATCH
    "/tool-outputs": {"outputs": [{"call_id": "c", "output": "x"}]},
    "/approvals": {"call_id": "c", "decision": "approve"},
    "/delegate": {"input": "x"},
    "/processes": {"command": "true"},
}
# Where one path takes different bodies by method.
VALID_BODIES_BY_METHOD = {
    ("PATCH", "/shared-state"): [{"op": "add", "path": "/k", "value": 1}],
    ("PUT", "/shared-state"): {"k": 1},
}


async def test_r16_every_session_route_is_404_for_another_tenant(
    http: httpx.AsyncClient, server: Server, store: Stores
) -> None:
    sid = await new_session(http)
    await http.post(f"/v1/sessions/{sid}/items", json={"items": [USER]})
    intruder = await make_tenant(store)
    schema = (await http.get("/openapi.json")).json()
    routes = session_routes(schema)
    assert len(routes) >= 12, routes
    async with httpx.AsyncClient(base_url=server.base_url, headers=intruder.headers) as other:
        bodies_seen = set()
        for method, template in routes:
            path = template.replace("{session_id}", sid)
            path = re.sub(r"\{[a-z_]+\}", "x", path)
            suffix = template.removeprefix("/v1/sessions/{session_id}")
            body = VALID_BODIES_BY_METHOD.get(
                (method, suffix),
                VALID_BODIES.get(suffix, {}) if method in ("POST", "PATCH") else None,
            )
            response = await other.request(method, path, json=body)
            assert response.status_code == 404, (method, template, response.text)
            assert response.json()["code"] == "session_not_found"
            bodies_seen.add(response.json()["detail"].replace(sid, "ID"))
            missing = await other.request(method, path.replace(sid, "no-such-session"), json=body)
            assert missing.status_code == 404
        assert len(bodies_seen) == 1
        listing = (await other.get("/v1/sessions")).json()["data"]
        assert listing == []
        fork_into = await other.post(f"/v1/sessions/{sid}/fork", json={})
        assert fork_into.status_code == 404
    # The owner still sees an untouched session.
    events = (await http.get(f"/v1/sessions/{sid}/events")).json()["data"]
    assert [e["type"] for e in events] == ["SESSION_CREATED", "MEMORY_ITEMS_APPENDED"]


MALFORMED = [
    b"",
    b"{",
    b"null",
    b"[]",
    b'{"items": "x"}',
    b'{"at_seq": "a"}',
    b"\xff\xfe",
    b'{"state": 1}',
]


async def test_no_route_answers_500_to_malformed_input(http: httpx.AsyncClient) -> None:
    sid = await new_session(http)
    schema = (await http.get("/openapi.json")).json()
    for path, methods in schema["paths"].items():
        for method in methods:
            url = path.replace("{session_id}", sid)
            for body in MALFORMED:
                # Streamed, and closed after the status line: an SSE route that finds the
                # request acceptable answers with a stream that never ends by itself.
                async with http.stream(
                    method.upper(),
                    url,
                    content=body,
                    headers={"content-type": "application/json"},
                    params={"limit": "-5", "after_seq": "x", "cursor": "%%%", "full": "maybe"},
                ) as response:
                    assert response.status_code < 500, (method, path, body)
