"""Returning pooled connections (`check_in`): at once when nothing needs the wire, and
whole even when the caller is cancelled while the return waits on the wire."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import greenlet_spawn

from app.settings import Settings
from app.store.engine import make_engine
from app.store.postgres.check_in import check_in
from app.store.stores import Stores


@pytest.fixture
def engine(store: Stores) -> AsyncEngine:
    engine: AsyncEngine = store.database.engine  # type: ignore[attr-defined]
    return engine


def _checked_out(engine: AsyncEngine) -> int:
    pool: Any = engine.pool
    return int(pool.checkedout())


async def _in_adapter_transaction(engine: AsyncEngine) -> Any:
    """A checked-out connection whose adapter has a transaction open: its return must roll
    it back on the wire."""
    fairy = await engine.raw_connection()
    cursor = fairy.dbapi_connection.cursor()
    await greenlet_spawn(cursor.execute, "SELECT 1")
    assert fairy.dbapi_connection._transaction is not None
    return fairy


async def test_a_bare_checkout_returns_without_waiting(engine: AsyncEngine) -> None:
    before = _checked_out(engine)
    fairy = await engine.raw_connection()
    assert await fairy.driver_connection.fetchval("SELECT 41 + 1") == 42
    assert _checked_out(engine) == before + 1
    await check_in(fairy)
    assert _checked_out(engine) == before


async def test_a_return_that_rolls_back_finishes_and_the_connection_is_clean(
    engine: AsyncEngine,
) -> None:
    before = _checked_out(engine)
    fairy = await _in_adapter_transaction(engine)
    await check_in(fairy)
    assert _checked_out(engine) == before
    again = await engine.raw_connection()
    try:
        assert await again.driver_connection.fetchval("SELECT txid_current_if_assigned()") is None
        assert not again.driver_connection.is_in_transaction()
    finally:
        await check_in(again)


async def test_a_cancelled_caller_still_returns_the_connection(engine: AsyncEngine) -> None:
    before = _checked_out(engine)
    fairy = await _in_adapter_transaction(engine)
    returning = asyncio.get_running_loop().create_task(check_in(fairy))
    await asyncio.sleep(0)  # its first step ran and now waits on the rollback
    returning.cancel()
    with pytest.raises(asyncio.CancelledError):
        await returning
    for _ in range(200):  # bounded: the rollback is one round trip on loopback
        if _checked_out(engine) == before:
            break
        await asyncio.sleep(0.01)
    assert _checked_out(engine) == before


async def test_a_connection_beyond_the_pool_is_closed_when_it_comes_back(
    settings: Settings,
) -> None:
    """The pool has room for one: the second connection back is an overflow one, which the
    return must close (on the wire) rather than keep."""
    engine = make_engine(settings.model_copy(update={"db_pool_size": 1, "db_max_overflow": 1}))
    pool: Any = engine.pool
    try:
        first = await engine.raw_connection()
        second = await engine.raw_connection()
        driver: Any = second.driver_connection
        await check_in(first)
        assert pool.checkedin() == 1
        await check_in(second)
        assert driver.is_closed()
        assert pool.checkedout() == 0
        assert pool.checkedin() == 1
        again = await engine.raw_connection()
        fresh: Any = again.driver_connection
        assert await fresh.fetchval("SELECT 1") == 1
        await check_in(again)
    finally:
        await engine.dispose()
