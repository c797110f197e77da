"""Calling PostgreSQL's stored functions: one statement, one round trip, one commit.

Every write that inserts events is one call of a stored function (`sql/*.sql`), made with
one statement on the bare asyncpg connection of a pooled SQLAlchemy connection: outside a
transaction it commits on its own, so it is one round trip and one durable commit. Behind
PgBouncer in transaction pooling it runs inside BEGIN/COMMIT, because prepare and execute
could otherwise reach different servers.

The functions refuse with SQLSTATE `AS0xx` exceptions (which roll everything back); they
are mapped here onto the runtime's domain errors, the same ones SQLite's store raises.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, NoReturn

import asyncpg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util import greenlet_spawn

from app.runtime.errors import (
    IdempotentReplay,
    InvalidForkPoint,
    RunAlreadyActive,
    RunFenced,
    SessionAlreadyExists,
    SessionNotFound,
    StaleSession,
    too_many_runs,
)
from app.runtime.session.events import Event, NewEvent
from app.store.payloads import new_event_ids
from app.store.postgres.check_in import check_in


@functools.cache
def named_call(function: str, params: tuple[str, ...], columns: str = "*") -> str:
    """`SELECT columns FROM function(p => $1, ...)`: named, so a call can never bind an
    argument to the wrong parameter, and a parameter added with a default breaks no caller."""
    bound = ", ".join(f"{p} => ${i}" for i, p in enumerate(params, start=1))
    return f"SELECT {columns} FROM {function}({bound})"


# asr_append_events' parameters in the order of an append's arguments (`AppendGroups` items).
APPEND_PARAMS = (
    "p_tenant",
    "p_session",
    "p_expected_seq",
    "p_expected_version",
    "p_now",
    "p_events",
    "p_idem_key",
    "p_idem_hash",
    "p_idem_expires",
    "p_metadata",
    "p_snapshot_kind",
    "p_snapshot_state",
    "p_snapshot_hash",
)
APPEND_EVENTS = named_call("asr_append_events", APPEND_PARAMS)
# The same append for events whose ids were made for this call (a first attempt): the
# write-token check, a statement planned at every call, only answers a re-sent append.
APPEND_FRESH = named_call("asr_append_fresh", APPEND_PARAMS)


# NewEvent's fields that go to their columns as they are: every one but the type and the
# payload (which `EventArrays.of` encodes itself). A new event column is a field of
# NewEvent and a line in the INSERTs of insert_events.sql and insert_event_sets.sql;
# nothing here.
_PLAIN_FIELDS = tuple(f.name for f in fields(NewEvent) if f.name not in ("type", "payload"))


@dataclass(frozen=True, slots=True)
class EventArrays:
    """Events as the functions take them: one JSON array (`p_events`) of objects with the
    event's id, type and payload and NewEvent's other fields by name, read by
    `asr_insert_events` and `asr_insert_event_sets` alone. Payloads are JSON text encoded
    once (redacted and size-checked by the caller's funnel) and spliced in, not encoded
    again."""

    ids: list[str]
    events: list[NewEvent]
    clean: list[dict[str, Any]]  # the payloads as stored (redacted), for the Events
    text: str  # the JSON array

    @classmethod
    def of(
        cls, events: list[NewEvent], persistable: Callable[[dict[str, Any]], tuple[Any, str]]
    ) -> EventArrays:
        ids = new_event_ids(len(events))
        clean, parts = [], []
        dumps = json.dumps
        for event_id, e in zip(ids, events, strict=True):
            value, payload = persistable(e.payload)
            clean.append(value)
            plain = "".join(
                f',"{name}":null' if (v := getattr(e, name)) is None else f',"{name}":{dumps(v)}'
                for name in _PLAIN_FIELDS
            )
            parts.append(
                f'{{"id":"{event_id}","type":{dumps(str(e.type))}{plain},"payload":{payload}}}'
            )
        return cls(ids=ids, events=events, clean=clean, text=f"[{','.join(parts)}]")

    def params(self) -> dict[str, Any]:
        """The events as the functions' named parameter."""
        return {"p_events": self.text}

    def written(
        self, session_id: str, first: int, now: datetime, positions: list[int]
    ) -> list[Event]:
        """The events as committed with seqs `first`, `first`+1, ...."""
        return [
            e.stored(self.ids[i], session_id, first + i, self.clean[i], now, positions[i])
            for i, e in enumerate(self.events)
        ]


class Functions:
    """Calls of the stored functions, by name with named parameters, on pooled connections.

    `await functions.call("asr_run_step", p_tenant=..., p_run=..., ...)`: the keywords are
    the SQL parameters' names, so the Python side and the `.sql` source cannot drift apart
    silently (a wrong name is an error from PostgreSQL). A refusal (`AS0xx`) is raised as
    its domain error (see `refusal`).
    """

    def __init__(self, engine: AsyncEngine, *, in_transaction: bool) -> None:
        self.engine = engine
        self.in_transaction = in_transaction

    async def call(
        self,
        function: str,
        *,
        columns: str = "*",
        max_live: int | None = None,
        conn: AsyncConnection | None = None,
        **params: Any,
    ) -> Any:
        """The one row of `function(**params)` (None when it returns no row); inside the
        open transaction of `conn` when one is given (a held session's write)."""
        sql = named_call(function, tuple(params), columns)
        try:
            if conn is not None:
                return await call_in(conn, sql, tuple(params.values()))
            return await call(
                self.engine, sql, tuple(params.values()), in_transaction=self.in_transaction
            )
        except Refused as refused:
            raise refusal(
                refused.cause,
                session_id=params.get("p_session") or params.get("p_source"),
                run_id=params.get("p_run"),
                max_live=max_live,
            ) from None


class Refused(Exception):
    """A function's own refusal (SQLSTATE class AS): not a driver failure."""

    def __init__(self, cause: asyncpg.PostgresError) -> None:
        super().__init__(str(cause))
        self.cause = cause


async def call(
    engine: AsyncEngine,
    sql: str,
    args: tuple[Any, ...],
    *,
    in_transaction: bool,
    all_rows: bool = False,
) -> Any:
    """Run `sql` on a pooled connection's asyncpg connection; its one row (or None), or
    with `all_rows` the list of its rows.

    The pooled connection is checked out bare (`raw_connection`), not wrapped in an
    `AsyncConnection`: half the Python of a checkout, and these calls need nothing of
    SQLAlchemy's but the pool (idle ping, reset and invalidation included). The check-in
    is beyond cancellation's reach, as `AsyncConnection.close`'s is (`check_in`).

    Raises:
        Refused: the function refused (SQLSTATE `AS0xx`); everything was rolled back.
        DBAPIError (and its subclasses), as SQLAlchemy raises them, for anything else.
    """
    fairy = await engine.raw_connection()
    try:
        adapter: Any = fairy.dbapi_connection
        driver: Any = fairy.driver_connection
        fetch = driver.fetch if all_rows else driver.fetchrow
        try:
            if in_transaction:
                async with driver.transaction():
                    return await fetch(sql, *args)
            return await fetch(sql, *args)
        except asyncpg.PostgresError as exc:
            if str(getattr(exc, "sqlstate", "")).startswith("AS"):
                raise Refused(exc) from exc
            await _raise_as_sqlalchemy(engine, fairy, adapter, sql, exc)
        except Exception as exc:
            await _raise_as_sqlalchemy(engine, fairy, adapter, sql, exc)
    finally:
        await check_in(fairy)


async def call_in(conn: AsyncConnection, sql: str, args: tuple[Any, ...]) -> Any:
    """`call`'s one row, inside the open transaction of `conn`: it commits with that
    transaction (a refusal still raises `Refused`, and the caller's block rolls back)."""
    driver: Any = (await conn.get_raw_connection()).driver_connection
    try:
        return await driver.fetchrow(sql, *args)
    except asyncpg.PostgresError as exc:
        if str(getattr(exc, "sqlstate", "")).startswith("AS"):
            raise Refused(exc) from exc
        raise


async def _raise_as_sqlalchemy(
    engine: AsyncEngine, fairy: Any, adapter: Any, sql: str, exc: Exception
) -> NoReturn:
    """Raise `exc` as SQLAlchemy would have for the same statement.

    The adapter translates asyncpg's exception into its DB-API class (the same mapping the
    SQLAlchemy path goes through); that is wrapped in `DBAPIError.instance`, so callers see
    IntegrityError, OperationalError, ... with `connection_invalidated` set when the
    connection died, in which case it is invalidated here and never returns to the pool.
    Anything the adapter does not translate is raised unchanged.
    """
    dialect = engine.dialect
    dbapi = dialect.loaded_dbapi
    try:
        adapter._handle_exception(exc)
    except dbapi.Error as translated:
        error: Exception = translated
    except Exception as other:
        error = other
    # Any exception: asyncpg's dialect decides by the connection's state or an isinstance
    # check, though the annotation says a DB-API Error.
    invalidated = bool(dialect.is_disconnect(error, adapter, None))  # type: ignore[arg-type]
    if invalidated:
        await greenlet_spawn(fairy.invalidate, error)
    if isinstance(error, dbapi.Error):
        raise DBAPIError.instance(
            sql, None, error, dbapi.Error, connection_invalidated=invalidated, dialect=dialect
        ) from exc
    raise exc


def refusal(
    exc: Exception,
    *,
    session_id: str | None = None,
    run_id: str | None = None,
    max_live: int | None = None,
) -> Exception:
    """The domain error for a function's `AS0xx` refusal."""
    code = getattr(exc, "sqlstate", None)
    message = getattr(exc, "message", "")
    if code == "AS001":
        return too_many_runs(max_live)
    if code == "AS002":
        return SessionNotFound(session_id or "")
    if code == "AS003":
        return RunAlreadyActive(message or None)
    if code == "AS005":
        return StaleSession(session_id or "")
    if code == "AS006":
        return IdempotentReplay(message)
    if code == "AS007":
        last_seq = int(message)
        return InvalidForkPoint(f"at_seq must be between 0 and {last_seq}", last_seq=last_seq)
    if code == "AS008":
        return SessionAlreadyExists(session_id or "")
    if code == "AS004":
        return RunFenced(f"run {run_id} was taken over or is not queued")
    return exc
