"""Returning a pooled connection where cancellation cannot cut the return short.

`asyncio.shield` would do, but it makes a task (and costs a turn of the loop) on every call,
and nearly every check-in needs no I/O at all: the stored-function calls go around
SQLAlchemy's adapter, so the adapter has no transaction to roll back and the reset is a
no-op. So the check-in's first step runs here, in the caller's task, and a check-in that
finishes in it (the usual case) costs no task; one that does wait on the wire (a rollback,
closing an invalidated connection) is finished by a shielded task, exactly as before.

Most check-ins are known beforehand to need no I/O (`_returns_in_place`); those skip even
the greenlet that SQLAlchemy's awaits need, whose making was most of a check-in's cost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from sqlalchemy.pool import QueuePool
from sqlalchemy.util import greenlet_spawn


async def check_in(fairy: Any) -> None:
    """Close (return to its pool) a connection checked out with `raw_connection()`."""
    if _returns_in_place(fairy):
        fairy.close()
        return
    closing = greenlet_spawn(fairy.close)
    try:
        waiting = closing.send(None)
    except StopIteration:
        return
    await asyncio.shield(_finish(closing, waiting))


def _returns_in_place(fairy: Any) -> bool:
    """Whether returning `fairy` cannot wait on the wire: a valid connection (an invalid
    one is closed), whose adapter has no transaction (the reset then rolls back nothing),
    going back to a pool with room for it (an overflow connection that finds the pool full
    is closed). Anything unlike what this knows of SQLAlchemy's pool and asyncpg adapter
    takes the general path."""
    pool = getattr(fairy, "_pool", None)
    adapter = fairy.dbapi_connection
    return (
        isinstance(pool, QueuePool)
        and fairy.is_valid
        and getattr(adapter, "_transaction", False) is None
        and not getattr(adapter, "_started", False)  # SQLAlchemy 2.0's rollback asks this
        and pool.checkedin() < pool.size()
    )


async def _finish(closing: Coroutine[Any, Any, Any], waiting: Any) -> None:
    """Drive `closing` on from a suspension, as a task would: wait for what it waits on,
    then resume it (a failed wait raises inside it, where it awaited)."""
    while True:
        if isinstance(waiting, asyncio.Future):
            await asyncio.wait((waiting,))
        else:  # a bare yield: give the loop one turn
            await asyncio.sleep(0)
        try:
            waiting = closing.send(None)
        except StopIteration:
            return
