"""What a database outage looks like to the code above the store.

An outage -- the server refuses connections or drops them, the pool times out, the server
is shutting down or out of connections -- is not a bug of this service: the request may
succeed if the client retries a little later, so the API answers 503 `database_unavailable`
with Retry-After rather than a 500. The store does not translate every call site (the
driver can fail anywhere, including on the bare asyncpg fast paths); instead this module
names the exception classes an outage can arrive as, and decides for one exception whether
it is one. Only here and in the rest of `app/store` are SQLAlchemy and asyncpg known.
"""

from __future__ import annotations

from types import TracebackType

import asyncpg
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.runtime.errors import OutageSignature

# The classes to catch; `is_database_outage` then decides for the instance.
OUTAGE_ERROR_TYPES: tuple[type[Exception], ...] = (
    DBAPIError,
    PoolTimeout,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    OSError,
)

# Raw asyncpg errors that mean "no usable connection" (on the bare-driver fast paths
# SQLAlchemy does not wrap them): class 08 (connection exception), 57P01-57P03 (the server
# is shutting down or starting), 53300 (too many connections), and a closed connection.
_ASYNCPG_OUTAGES: tuple[type[Exception], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
)
_DRIVER_MODULES = ("asyncpg", "sqlalchemy", "aiosqlite", "sqlite3")
_MAX_CHAIN = 16
_MAX_FRAMES = 1000


def is_database_outage(exc: BaseException) -> bool:
    """Whether `exc` (or an exception it was raised from) says the database is unreachable.

    OSError (connection refused, reset, DNS, connect timeout) counts only when a database
    driver raised it: the same class from a subprocess or a file is a bug, not an outage.
    """
    seen: BaseException | None = exc
    for _ in range(_MAX_CHAIN):  # bounded: a cause chain can, in theory, be a cycle
        if seen is None:
            return False
        if _is_outage_itself(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _is_outage_itself(exc: BaseException) -> bool:
    if isinstance(exc, PoolTimeout):
        return True  # QueuePool limit reached and no connection came back in time
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError)
    if isinstance(exc, _ASYNCPG_OUTAGES):
        return True
    return isinstance(exc, OSError) and _raised_in_driver(exc.__traceback__)


def _raised_in_driver(tb: TracebackType | None) -> bool:
    for _ in range(_MAX_FRAMES):
        if tb is None:
            return False
        module = tb.tb_frame.f_globals.get("__name__", "")
        if module.split(".", 1)[0] in _DRIVER_MODULES:
            return True
        tb = tb.tb_next
    return False


# What the API is given (by `app.main`) to answer outages 503: it never imports the store.
OUTAGES = OutageSignature(types=OUTAGE_ERROR_TYPES, check=is_database_outage)
