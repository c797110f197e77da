"""The PostgreSQL fast path of an append: one call of `asr_append_events` (migration 0006),
or a share of one `asr_append_batch` when appends arrive together (group_commit.py).

Through SQLAlchemy an append is five round trips (BEGIN, tenant scope, reserve UPDATE,
INSERT, COMMIT), each with its own layer of Python. Here the same steps run inside
one server-side function, called with the bare asyncpg connection of a pooled SQLAlchemy
connection. Outside PgBouncer the call runs with no explicit transaction, so it is its own
transaction: one round trip, one durable commit. Behind PgBouncer (transaction pooling) it
runs inside BEGIN/COMMIT, because asyncpg's uncached statement is prepared and executed in
two exchanges that PgBouncer may otherwise send to two different server connections.

What the caller sees is what the SQLAlchemy path gives: the same `AppendResult`, the same
domain errors, the wake-ups (`notify.py`) and the metrics call after the
commit, and driver failures raised as SQLAlchemy `DBAPIError`s (a dead connection is
invalidated, never put back in the pool; see `pgfunctions.call`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.runtime.errors import SeqConflict, SessionNotFound, VersionConflict
from app.runtime.events import Event
from app.runtime.ports import AppendResult, SessionRecord
from app.store.base import StoreBase, utcnow
from app.tracing import span

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
    )
    with span("store.write", **_SPAN_ATTRIBUTES):
        row = await store.append_groups.append(args)
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
    # Committed: wake-ups and metrics, once per transaction (as StoreBase.write).
    store.committed(tenant_id, session_id, written)
    return AppendResult(session=record, events=written)


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
