"""Issue #17, defect 7: revoking a key did not end its streams.

A stream opened with a key still delivered events 30 s after the key was revoked (new
requests got 401 only once the auth cache expired), and a deleted tenant's stream token
still opened the tenant stream until its TTL. Now every replica re-checks the keys of its
open streams every ASR_SSE_KEY_CHECK_SECONDS (2 s): a stream whose key is revoked, or gone
with its tenant, ends with one `ERROR` frame carrying the 401 problem -- session and tenant
timelines, by key or by token, and runs in stream mode alike. A token is checked against its
key when a stream opens, so a deleted tenant's token is refused at once. Two real servers
share the database; the key is revoked in the database, as `asr key revoke` does.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.runtime.access.accounts import Accounts
from app.runtime.access.keys import parse_key
from app.store.stores import Stores
from tests.conftest import Server, TenantKey, make_tenant
from tests.sse.conftest import (
    Frame,
    append_item,
    gauges,
    new_session,
    read_frames,
    start_sse_server,
    stop_and_check,
    wait_until,
)

SECRET = secrets.token_urlsafe(32)


@pytest.fixture(scope="module")
def replicas(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Server]]:
    logs = tmp_path_factory.mktemp("revocation")
    started: dict[str, Server] = {}
    try:
        for name in ("a", "b"):  # the same token secret: a token works on both
            started[name] = start_sse_server(
                database_url, logs, name, ASR_STREAM_TOKEN_SECRET=SECRET
            )
        yield started
    finally:
        for srv in started.values():
            stop_and_check(srv)


class Follower:
    """One open stream, read in a task: `opened` once its first event arrived, `frames`
    everything it received, `done` when the server ended it."""

    def __init__(
        self, into: list[Follower], client: httpx.AsyncClient, method: str, path: str, **kw: Any
    ) -> None:
        self.opened = asyncio.Event()
        self.frames: list[Frame] = []
        self.task = asyncio.create_task(self._run(client, method, path, kw))
        into.append(self)

    async def _run(self, client: httpx.AsyncClient, method: str, path: str, kw: Any) -> None:
        async with client.stream(method, path, **kw) as response:
            assert response.status_code == 200, await response.aread()
            async for frame in read_frames(response):
                self.frames.append(frame)
                if frame.id is not None:
                    self.opened.set()

    @property
    def ids(self) -> list[str]:
        return [f.id for f in self.frames if f.id is not None]

    async def ended(self) -> Frame:
        """The stream's last frame, once the server has ended it (a hang guard bounds it)."""
        async with asyncio.timeout(30):
            await self.task
        return self.frames[-1]


@asynccontextmanager
async def following() -> AsyncIterator[list[Follower]]:
    """Every Follower started in the block, cancelled when it ends (before the clients
    close, when entered after them), so that a failing test hangs nowhere."""
    started: list[Follower] = []
    try:
        yield started
    finally:
        for follower in started:
            follower.task.cancel()
        await asyncio.gather(*(f.task for f in started), return_exceptions=True)


async def open_status(client: httpx.AsyncClient, path: str, **kw: Any) -> httpx.Response:
    """The answer to opening a stream, read only up to its headers (a stream that opened
    would not end by itself); the body is read when it is a problem document."""
    async with client.stream("GET", path, **kw) as response:
        if not response.headers["content-type"].startswith("text/event-stream"):
            await response.aread()
        return response


def assert_refused(response: httpx.Response) -> None:
    assert response.status_code == 401, response.status_code
    assert response.json()["code"] == "unauthorized"


def assert_unauthorized_end(last: Frame) -> None:
    assert last.event == "ERROR", last
    assert last.json["status"] == 401 and last.json["code"] == "unauthorized", last.json


async def test_revoking_a_key_ends_its_streams_on_every_replica(
    replicas: dict[str, Server],
    store: Stores,
    tenant: TenantKey,
) -> None:
    accounts = Accounts(store.accounts)
    doomed, _ = await accounts.create_key(tenant.name, name="to-revoke")
    parsed = parse_key(doomed)
    assert parsed is not None
    doomed_headers = {"Authorization": f"Bearer {doomed}"}
    a, b = replicas["a"].base_url, replicas["b"].base_url
    async with (
        httpx.AsyncClient(base_url=a, headers=tenant.headers, timeout=15) as keeper,
        httpx.AsyncClient(base_url=a, headers=doomed_headers, timeout=15) as on_a,
        httpx.AsyncClient(base_url=b, headers=doomed_headers, timeout=15) as on_b,
        httpx.AsyncClient(base_url=b, timeout=15) as browser_b,
        following() as followers,
    ):
        sid = await new_session(keeper)
        run_sid = await new_session(keeper)
        issued = await on_a.post("/v1/stream-tokens", json={})
        assert issued.status_code == 201, issued.text
        token = issued.json()["token"]
        timeline = f"/v1/sessions/{sid}/events/stream"
        slow_run = {"input": "[sleep:20000] slow", "mode": "stream"}
        doomed_streams = {
            "a: session stream, key": Follower(followers, on_a, "GET", timeline),
            "a: tenant stream, key": Follower(followers, on_a, "GET", "/v1/events/stream"),
            "a: run stream, key": Follower(
                followers, on_a, "POST", f"/v1/sessions/{run_sid}/runs", json=slow_run
            ),
            "b: session stream, key": Follower(followers, on_b, "GET", timeline),
            "b: tenant stream, token": Follower(
                followers, browser_b, "GET", "/v1/events/stream", params={"token": token}
            ),
        }
        kept = Follower(followers, keeper, "GET", timeline)
        async with asyncio.timeout(30):
            for follower in (*doomed_streams.values(), kept):
                await follower.opened.wait()

        await accounts.revoke_key(parsed[0])
        revoked_at = time.monotonic()
        for name, follower in doomed_streams.items():
            last = await follower.ended()
            print(f"{name}: ended {time.monotonic() - revoked_at:.2f} s after the revocation")
            assert_unauthorized_end(last)

        # The other key's stream goes on, and so does the run the revoked stream watched.
        seq = await append_item(keeper, sid, "after the revocation")

        async def kept_has_it() -> bool:
            return str(seq) in kept.ids

        await wait_until(kept_has_it, within=15)
        assert not kept.task.done()
        assert str(seq) not in doomed_streams["b: session stream, key"].ids
        run = (await keeper.get(f"/v1/sessions/{run_sid}/runs")).json()["data"][0]
        assert run["status"] == "running", run

        # Opening again: the token is refused at once (its key is checked, not cached).
        assert_refused(await open_status(browser_b, "/v1/events/stream", params={"token": token}))

        async def slots_back() -> bool:
            ga, gb = await gauges(a), await gauges(b)
            return (
                ga["open_streams_by_tenant"].get(tenant.tenant_id) == 1
                and tenant.tenant_id not in gb["open_streams_by_tenant"]
            )

        await wait_until(slots_back, within=15)
        await keeper.post(f"/v1/sessions/{run_sid}/runs/{run['run_id']}/cancel")


async def test_a_deleted_tenants_token_is_refused_at_once_and_its_streams_end(
    replicas: dict[str, Server], store: Stores
) -> None:
    gone = await make_tenant(store)
    a = replicas["a"].base_url
    async with (
        httpx.AsyncClient(base_url=a, headers=gone.headers, timeout=15) as http,
        httpx.AsyncClient(base_url=a, timeout=15) as browser,
        following() as followers,
    ):
        await new_session(http)
        token = (await http.post("/v1/stream-tokens", json={})).json()["token"]
        by_key = Follower(followers, http, "GET", "/v1/events/stream")
        by_token = Follower(followers, browser, "GET", "/v1/events/stream", params={"token": token})
        async with asyncio.timeout(30):
            await by_key.opened.wait()
            await by_token.opened.wait()

        async with store.database.write(gone.tenant_id) as conn:  # its keys and sessions go with it
            await conn.execute(
                text("DELETE FROM tenants WHERE tenant_id = :t"), {"t": gone.tenant_id}
            )
        assert_refused(await open_status(browser, "/v1/events/stream", params={"token": token}))
        for follower in (by_key, by_token):
            assert_unauthorized_end(await follower.ended())
