"""Issue #17, defect 6: `?ssl=require` in ASR_DATABASE_URL broke LISTEN for good.

The URL was reused as an asyncpg DSN for the LISTEN connection, where a parameter asyncpg
does not know -- `ssl` -- is sent to the server as a setting, which the server refuses: the
bus reconnected forever and cross-process delivery fell back to polling. And the pool,
which receives the URL's parameters as keywords, failed on libpq's `sslmode` and
`sslrootcert`. Now both read the TLS parameters the same way.

Against a PostgreSQL of our own with TLS on that refuses any TCP connection without it: a
real server starts on each spelling, its pool works, its LISTEN connection is up, and an
event appended by another process reaches a stream through NOTIFY (polling is set to 5
minutes, so nothing else could deliver it). Skipped without the PostgreSQL binaries, except
under CI=true.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.runtime.session.events import EventType, NewEvent
from app.settings import Settings
from app.store.engine import make_engine
from app.store.migrations import upgrade_head
from app.store.pg_tls import asyncpg_dsn, pool_options, split_tls
from app.store.stores import open_stores
from tests.conftest import make_tenant, start_server, stop_server
from tests.pgcluster import ThrowawayPostgres, throwaway_cluster
from tests.sse.conftest import new_session, read_frames


@pytest.fixture(scope="module")
def tls_postgres() -> Iterator[ThrowawayPostgres]:
    with throwaway_cluster(tls=True, required=os.environ.get("CI") == "true") as cluster:
        upgrade_head(cluster.url + "?ssl=require")  # migrations read the URL the same way
        yield cluster


@pytest.mark.parametrize(
    "query",
    ["ssl=require", "sslmode=require", "sslmode=verify-full&sslrootcert={cert}"],
)
async def test_tls_parameters_work_for_the_pool_and_for_listen(
    tls_postgres: ThrowawayPostgres, tmp_path: Path, query: str
) -> None:
    url = f"{tls_postgres.url}?{query.format(cert=tls_postgres.cert_path)}"
    await _refuses_plain_connections(tls_postgres.url)
    engine = make_engine(Settings(database_url=url, bootstrap_default_tenant=False))
    store = open_stores(engine)
    server = start_server(
        url, tmp_path / "server.log", ASR_DEBUG_ENDPOINTS="true", ASR_SSE_POLL_SECONDS="300"
    )
    try:
        tenant = await make_tenant(store)
        async with httpx.AsyncClient(
            base_url=server.base_url, headers=tenant.headers, timeout=15
        ) as http:
            sid = await new_session(http)  # the pool works
            await _listener_connected(server.base_url)
            async with http.stream("GET", f"/v1/sessions/{sid}/events/stream") as stream:
                frames = read_frames(stream)
                async with asyncio.timeout(30):  # a hang guard
                    async for frame in frames:
                        if frame.id == "1":
                            break
                    # Appended by this process: only NOTIFY can tell the server's stream.
                    await store.ledger.append_events(
                        tenant.tenant_id,
                        sid,
                        events=[NewEvent(EventType.METADATA_UPDATED, {"over": "tls"})],
                    )
                    async for frame in frames:
                        if frame.id is not None:
                            assert frame.id == "2" and frame.event == "METADATA_UPDATED"
                            break
    finally:
        stop_server(server)
        await engine.dispose()
    log = server.log()
    assert "LISTEN connection failed" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


async def _refuses_plain_connections(url: str) -> None:
    """The cluster refuses TCP without TLS: a test that connects at all used TLS."""
    import asyncpg

    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError):
        await asyncpg.connect(asyncpg_dsn(url + "?sslmode=disable"), timeout=10)


async def _listener_connected(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        for _ in range(100):  # bounded: the bus connects right after the start
            bus = (await client.get("/debug/streams")).json()["bus"]
            if bus["listener"]["connected"]:
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"the LISTEN connection never came up: {bus}")


def test_the_tls_parameters_are_read_one_way() -> None:
    base = "postgresql+asyncpg://u:p@127.0.0.1:5432/db"
    assert split_tls(base + "?ssl=require&application_name=x")[1] == {"sslmode": "require"}
    assert split_tls(base + "?ssl=true")[1] == {"sslmode": "verify-full"}
    url, tls = split_tls(base + "?sslmode=verify-ca&sslrootcert=/ca.pem&ssl=verify-ca")
    assert tls == {"sslmode": "verify-ca", "sslrootcert": "/ca.pem"}
    assert url.render_as_string(hide_password=False) == base
    assert asyncpg_dsn(base + "?ssl=require").endswith("/db?sslmode=require")
    engine_url, connect_args = pool_options(base + "?ssl=require&sslrootcert=/ca.pem")
    assert engine_url.query == {}
    assert connect_args == {"dsn": "postgresql://?sslrootcert=%2Fca.pem&sslmode=require"}
    assert pool_options(base) == (split_tls(base)[0], {})
    for bad in ("?ssl=require&sslmode=disable", "?sslmode=sometimes", "?ssl=a&ssl=b"):
        with pytest.raises(ValueError):
            split_tls(base + bad)
