"""A write whose connection was invalidated (lost, or cancelled in the middle of its COMMIT
at shutdown) ends with its own error: forgetting what it touched must not reconnect it."""

from __future__ import annotations

import pytest

from app.store.base import _collecting
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


async def test_a_write_cancelled_mid_statement_ends_with_its_cancellation(store: Stores) -> None:
    """What `Database.write` does when a statement is cancelled (a replica stopping): the
    connection is invalidated, and leaving `_collecting` must not read its info."""
    async with store.database.engine.connect() as conn:
        with pytest.raises(ZeroDivisionError):
            async with _collecting(conn, []):
                await conn.invalidate()
                raise ZeroDivisionError  # the statement's own error, not PendingRollbackError
