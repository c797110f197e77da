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

from app.runtime.errors import SeqConflict, SessionNotFound, VersionConflict
from app.runtime.ports import AppendResult, IdempotencyToken
from app.store.base import session_from_mapping, utcnow
from app.store.idempotency import IdempotencyStore
from app.store.pgfunctions import EventArrays, Refused, refusal
from app.tracing import span

_SPAN_ATTRIBUTES = {"db.system": "postgresql"}


async def append(
    store: IdempotencyStore,
    tenant_id: str,
    session_id: str,
    events: EventArrays,
    *,
    expected_seq: int | None,
    expected_version: int | None,
    idempotency: IdempotencyToken | None,
) -> AppendResult:
    """Append `events` with one function call; semantics of `LedgerStore.append_events`.

    Raises:
        SessionNotFound, SeqConflict, VersionConflict, IdempotentReplay; DBAPIError for
        driver failures.
    """
    now = utcnow()
    args = (
        tenant_id,
        session_id,
        expected_seq,
        expected_version,
        now,
        *events.args(),
        *store.idempotency_args(idempotency),
    )
    with span("store.write", **_SPAN_ATTRIBUTES):
        try:
            row = await store.append_groups.append(args)
        except Refused as refused:
            raise refusal(refused.cause, args) from None
    if row is None:
        raise SessionNotFound(session_id)
    if not row["appended"]:
        if expected_version is not None and row["version"] != expected_version:
            raise VersionConflict(expected_version, row["version"])
        raise SeqConflict(expected_seq or 0, row["last_seq"])
    record = session_from_mapping(row)
    written = events.written(session_id, row["first_seq"], now, row["positions"])
    # Committed: wake-ups and metrics, once per transaction (as StoreBase.write).
    store.committed(tenant_id, session_id, written)
    return AppendResult(session=record, events=written)
