"""The PostgreSQL fast path of an append: one call of `asr_append_events` (migration 0005).

Through SQLAlchemy an append is six round trips (BEGIN, tenant scope, reserve UPDATE,
INSERT, NOTIFY, COMMIT), each with its own layer of Python. Here the same steps run inside
one server-side function, called with the bare asyncpg connection of a pooled SQLAlchemy
connection. Outside PgBouncer the call runs with no explicit transaction, so it is its own
transaction: one round trip, one durable commit. Behind PgBouncer (transaction pooling) it
runs inside BEGIN/COMMIT, because asyncpg's uncached statement is prepared and executed in
two exchanges that PgBouncer may otherwise send to two different server connections.

What the caller sees is what the SQLAlchemy path gives: the same `AppendResult`, the same
domain errors, NOTIFY only on commit, the in-process wake-ups and the metrics call after the
commit, and driver failures raised as SQLAlchemy `DBAPIError`s (a dead connection is
invalidated, never put back in the pool).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import greenlet_spawn

from app.runtime.errors import SeqConflict, SessionNotFound, VersionConflict
from app.runtime.events import Event
from app.runtime.ports import AppendResult, SessionRecord
from app.store.base import StoreBase, utcnow
from app.store.notify import CHANNEL, MAX_PAYLOAD_BYTES, Wakeup
from app.tracing import span

CALL = "SELECT * FROM asr_append_events($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"

_SPAN_ATTRIBUTES = {"db.system": "postgresql"}


@dataclass(frozen=True, slots=True)
class Prepared:
    """One event, ready to write: its type, ids, the redacted payload and its JSON text.

    The payload is encoded once (also for the size check); the JSON text goes to the server
    as text and is cast to jsonb there, the dict goes back to the caller in the `Event`.
    """

    type: str
    run_id: str | None
    turn_id: str | None
    payload: dict[str, Any]
    payload_json: str


async def append(
    store: StoreBase,
    tenant_id: str,
    session_id: str,
    events: Sequence[Prepared],
    *,
    expected_seq: int | None,
    expected_version: int | None,
) -> AppendResult:
    """Append `events` with one function call; semantics of `LedgerStore.append_events`.

    Raises:
        SessionNotFound, SeqConflict, VersionConflict; DBAPIError for driver failures.
    """
    now = utcnow()
    event_ids = [str(uuid.uuid4()) for _ in events]
    types = [e.type for e in events]
    args = (
        tenant_id,
        session_id,
        expected_seq,
        expected_version,
        now,
        event_ids,
        types,
        [e.run_id for e in events],
        [e.turn_id for e in events],
        [e.payload_json for e in events],
        CHANNEL if store.announcer.notify else None,
        MAX_PAYLOAD_BYTES,
    )
    with span("store.write", **_SPAN_ATTRIBUTES):
        row = await _call(store.engine, args, in_transaction=store.pgbouncer)
    if row is None:
        raise SessionNotFound(session_id)
    if not row["appended"]:
        if expected_version is not None and row["version"] != expected_version:
            raise VersionConflict(expected_version, row["version"])
        raise SeqConflict(expected_seq or 0, row["last_seq"])
    record = _session_record(row)
    if not events:
        return AppendResult(session=record, events=[])
    first = record.last_seq - len(events) + 1
    written = [
        Event(
            event_ids[i],
            session_id,
            first + i,
            e.type,
            e.payload,
            now,
            e.run_id,
            e.turn_id,
            position,
        )
        for i, (e, position) in enumerate(zip(events, row["positions"], strict=True))
    ]
    # Committed: this process's listeners now, metrics once per transaction (as StoreBase.write).
    store.announcer.after_commit([Wakeup(tenant_id, session_id, record.last_seq)])
    store.observer.events_appended(types)
    return AppendResult(session=record, events=written)


async def _call(engine: AsyncEngine, args: tuple[Any, ...], *, in_transaction: bool) -> Any:
    """Run the function on a pooled connection's asyncpg connection; one row or None.

    The pooled connection is checked out bare (`raw_connection`), not wrapped in an
    `AsyncConnection`: half the Python of a checkout, and the append needs nothing of
    SQLAlchemy's but the pool (idle ping, reset and invalidation included). The check-in
    is shielded from cancellation, as `AsyncConnection.close` is.
    """
    fairy = await engine.raw_connection()
    try:
        adapter: Any = fairy.dbapi_connection
        driver: Any = fairy.driver_connection
        try:
            if in_transaction:
                async with driver.transaction():
                    return await driver.fetchrow(CALL, *args)
            return await driver.fetchrow(CALL, *args)
        except Exception as exc:
            await _raise_as_sqlalchemy(engine, fairy, adapter, exc)
    finally:
        await asyncio.shield(greenlet_spawn(fairy.close))


async def _raise_as_sqlalchemy(
    engine: AsyncEngine, fairy: Any, adapter: Any, exc: Exception
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
    invalidated = bool(dialect.is_disconnect(error, adapter, None))
    if invalidated:
        await greenlet_spawn(fairy.invalidate, error)
    if isinstance(error, dbapi.Error):
        raise DBAPIError.instance(
            CALL, None, error, dbapi.Error, connection_invalidated=invalidated, dialect=dialect
        ) from exc
    raise exc


def _session_record(row: Any) -> SessionRecord:
    """The session columns of the function's row (asyncpg: aware datetimes, decoded JSON)."""
    created_at: datetime = row["created_at"]
    return SessionRecord(
        tenant_id=row["tenant_id"],
        session_id=row["session_id"],
        root_session_id=row["root_session_id"],
        parent_session_id=row["parent_session_id"],
        forked_from_seq=row["forked_from_seq"],
        status=row["status"],
        metadata=row["metadata"] or {},
        agent=row["agent"] or {},
        binding=row["binding"] or {},
        last_seq=row["last_seq"],
        version=row["version"],
        active_run_id=row["active_run_id"],
        created_at=created_at,
        updated_at=row["updated_at"],
    )
