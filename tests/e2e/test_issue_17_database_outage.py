"""Issue #17, defect 5: a database outage was a 500 that closed the connection.

With the database unreachable, every API call and every stream opening answered 500
`internal_error` with no Retry-After, and, since Starlette re-raises a 500 to the server
after answering, uvicorn closed each keep-alive connection. Now an outage (connection
refused or lost, pool timeout, the server shutting down) is a 503 `database_unavailable`
with Retry-After, on a connection that stays open; /readyz still says 503
`database_unreachable` and /healthz 200; once the database is back, requests succeed again.

A real `asr serve` reaches PostgreSQL through a loopback proxy that the test stops and
starts again (PostgreSQL only: SQLite is a file, with no server to lose).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.runtime.access.accounts import Accounts
from app.store.outage import is_database_outage
from app.store.stores import Stores
from tests.conftest import TenantKey, make_tenant, start_server, stop_server
from tests.tcpproxy import TcpProxy

PROBLEM = "application/problem+json"


def client_port(response: httpx.Response) -> int:
    """The client-side port of the connection that carried `response`."""
    return response.extensions["network_stream"].get_extra_info("client_addr")[1]


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["code"] == "database_unavailable"
    assert int(response.headers["retry-after"]) >= 1
    assert response.headers.get("connection", "").lower() != "close"


async def test_an_outage_is_a_503_with_retry_after_on_a_kept_connection(
    database_url: str, is_postgres: bool, store: Stores, tmp_path: Path
) -> None:
    if not is_postgres:
        pytest.skip("a database server to lose: the PostgreSQL pass")
    tenant = await make_tenant(store)
    unused_key, _ = await Accounts(store.accounts).create_key(tenant.name, name="not-cached")
    url = make_url(database_url)
    async with TcpProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        # In a thread: the server's start needs the proxy, which runs in this loop.
        server = await asyncio.to_thread(
            start_server, proxied, tmp_path / "server.log", ASR_DB_POOL_SIZE="2"
        )
        try:
            await _exercise_outage(server.base_url, tenant, unused_key, proxy)
        finally:
            await asyncio.to_thread(stop_server, server)
    log = server.log()
    assert "unhandled error" not in log, log[-4000:]
    assert "database unavailable" in log


async def _exercise_outage(base: str, tenant: TenantKey, unused_key: str, proxy: TcpProxy) -> None:
    # One connection for every request, so that keeping it is observable.
    async with httpx.AsyncClient(
        base_url=base,
        headers=tenant.headers,
        timeout=20,
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
    ) as http:
        created = await http.post("/v1/sessions", json={})
        assert created.status_code == 201, created.text
        sid = created.json()["session_id"]
        port = client_port(created)

        await proxy.stop()
        calls = [
            ("GET", f"/v1/sessions/{sid}", None, {}),
            ("GET", "/v1/sessions", None, {}),
            ("POST", "/v1/sessions", {}, {}),
            ("POST", f"/v1/sessions/{sid}/items", _item(), {}),
            ("GET", f"/v1/sessions/{sid}/events", None, {}),
            # A key this server has not cached: authentication itself needs the database.
            ("GET", "/v1/sessions", None, {"Authorization": f"Bearer {unused_key}"}),
        ]
        for method, path, body, headers in calls:
            response = await http.request(method, path, json=body, headers=headers)
            assert_unavailable(response)
            assert client_port(response) == port, (method, path, "the connection was closed")
        async with http.stream("GET", f"/v1/sessions/{sid}/events/stream") as stream:
            await stream.aread()  # the session is looked up before the stream starts
            assert_unavailable(stream)
            assert client_port(stream) == port, "the connection was closed"
        async with http.stream("GET", "/v1/events/stream") as stream:
            # With the key cached, nothing reads the database before the tenant stream
            # starts: its first read fails, and a stream reports that as its one ERROR frame.
            text = (await stream.aread()).decode()
            if stream.status_code == 200:
                assert "event: ERROR" in text and '"code":"database_unavailable"' in text, text
            else:
                assert_unavailable(stream)
            assert client_port(stream) == port, "the connection was closed"

        ready = await http.get("/readyz")
        assert ready.status_code == 503 and ready.json()["reason"] == "database_unreachable"
        assert (await http.get("/healthz")).status_code == 200
        assert client_port(ready) == port

        await proxy.start()
        for _ in range(100):  # bounded: the pool replaces its dead connections
            back = await http.get(f"/v1/sessions/{sid}")
            if back.status_code == 200:
                break
            assert_unavailable(back)
            await asyncio.sleep(0.2)
        assert back.status_code == 200, back.text
        appended = await http.post(f"/v1/sessions/{sid}/items", json=_item())
        assert appended.status_code == 201, appended.text


def _item() -> dict:
    return {"items": [{"type": "message", "role": "user", "content": "x"}]}


async def test_what_counts_as_an_outage() -> None:
    """Connection refused by the driver is an outage; the same OSError elsewhere, or a
    constraint violation, is not."""
    import asyncpg
    from sqlalchemy.exc import IntegrityError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    from tests.conftest import free_port

    try:
        await asyncpg.connect(host="127.0.0.1", port=free_port(), user="x", timeout=5)
    except OSError as exc:
        assert is_database_outage(exc)
    else:
        raise AssertionError("nothing listens there")
    try:
        raise ConnectionRefusedError("not from a driver")
    except OSError as exc:
        assert not is_database_outage(exc)
    assert is_database_outage(PoolTimeout("QueuePool limit of size 2 overflow 0 reached"))
    assert is_database_outage(OperationalError("SELECT 1", {}, Exception("gone")))
    assert is_database_outage(asyncpg.ConnectionDoesNotExistError("closed"))
    assert not is_database_outage(IntegrityError("INSERT", {}, Exception("duplicate")))
    try:
        try:
            raise asyncpg.CannotConnectNowError("the database system is starting up")
        except asyncpg.PostgresError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert is_database_outage(outer)
