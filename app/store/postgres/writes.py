"""`FunctionWrites`: what the ledger's and the runs' stored-function calls share.

The functions and group commit of the engine, the parameters every call takes the same way
(events as arrays, a snapshot, an Idempotency-Key), and what a call committed turned into
an `AppendResult`: live readers woken and metrics told (`PostgresLedger`, `PostgresRuns`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.ports import AppendResult, IdempotencyToken, RunRecord
from app.runtime.session.events import NewEvent
from app.store.base import note_appended, session_from_mapping
from app.store.payloads import Payloads
from app.store.postgres.calls import EventArrays, Functions
from app.store.postgres.database import PostgresDatabase
from app.store.postgres.group_commit import AppendGroups
from app.store.postgres.idempotency import PostgresIdempotency
from app.store.runs import run_from_mapping

SPAN = {"db.system": "postgresql"}
RUN_COLUMNS = "o_session, o_run, o_xact_id, o_positions"
SESSION_COLUMNS = "o_session, o_xact_id, o_positions"


class FunctionWrites:
    """The calls' shared parameters and results (one per database, shared by the stores)."""

    def __init__(
        self, db: PostgresDatabase, payloads: Payloads, idempotency: PostgresIdempotency
    ) -> None:
        self.db = db
        self.payloads = payloads
        self.idempotency = idempotency
        self.functions = Functions(db.engine, in_transaction=db.pgbouncer)
        self.append_groups = AppendGroups(db.engine, in_transaction=db.pgbouncer)

    def arrays(self, events: list[NewEvent]) -> EventArrays:
        """`events` as the functions take them (through the payload funnel)."""
        return EventArrays.of(events, self.payloads.persistable_json)

    def key(self, token: IdempotencyToken | None) -> dict[str, Any]:
        return self.idempotency.function_args(token)

    def snapshot(self, snapshot: tuple[str, dict[str, Any]] | None) -> dict[str, Any]:
        if snapshot is None:
            return {"p_snapshot_kind": None, "p_snapshot_state": None, "p_snapshot_hash": None}
        text, digest = self.payloads.persistable_snapshot(snapshot[1])
        return {"p_snapshot_kind": snapshot[0], "p_snapshot_state": text, "p_snapshot_hash": digest}

    def committed(self, row: Any, arrays: EventArrays, now: datetime) -> AppendResult:
        """What a function call committed: its session row (`o_session`) and `arrays` as
        events ending at the row's last seq; live readers are woken and metrics told."""
        record = session_from_mapping(row["o_session"])
        first = record.last_seq - len(arrays.ids) + 1
        written = arrays.written(record.session_id, first, now, row["o_positions"] or [])
        self.db.committed(record.tenant_id, record.session_id, written)
        return AppendResult(session=record, events=written)

    def held_result(
        self, conn: AsyncConnection, row: Any, arrays: EventArrays, now: datetime
    ) -> AppendResult:
        """`committed` for a call in a held transaction: announced when it commits."""
        record = session_from_mapping(row["o_session"])
        first = record.last_seq - len(arrays.ids) + 1
        written = arrays.written(record.session_id, first, now, row["o_positions"] or [])
        self.db.touch(conn, record.tenant_id, record.session_id, record.last_seq, written)
        note_appended(conn, [e.type for e in written])
        return AppendResult(session=record, events=written)

    def run_result(
        self, row: Any, arrays: EventArrays, now: datetime
    ) -> tuple[RunRecord, AppendResult]:
        return run_from_mapping(row["o_run"]), self.committed(row, arrays, now)
