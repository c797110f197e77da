"""A write whose connection was invalidated (lost, or cancelled in the middle of its COMMIT
at shutdown) ends with its own error: forgetting what it touched must not reconnect it."""

from __future__ import annotations

from app.store.stores import Stores


async def test_discarding_an_invalidated_connections_wakeups_does_not_reconnect(
    store: Stores,
) -> None:
    announcer = store.database.announcer
    async with store.database.engine.connect() as conn:
        announcer.begin(conn)
        announcer.touch(conn, "t", "s", 1)
        await conn.invalidate()
        announcer.discard(conn)  # reading conn.info here would reconnect: MissingGreenlet
        assert conn.invalidated
