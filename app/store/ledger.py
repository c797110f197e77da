"""Sessions, their event ledger and their snapshots.

The one rule everything here keeps: a session's `seq` is assigned in the same transaction
that inserts the events, after locking the session row with the UPDATE that bumps
`last_seq`. Concurrent writers on one session therefore queue on that row lock (PostgreSQL)
or on the single writer (SQLite, BEGIN IMMEDIATE), and seqs come out 1..N with no gap and no
duplicate. There is no `SELECT max(seq) + 1` and no table lock anywhere.

On PostgreSQL the common append (no metadata patch, no snapshot) runs those same steps in
one server-side function call (`pg_append.py`, migration 0005) instead of six statements.
"""

from __future__ import annotations

import functools
import json
import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Text,
    bindparam,
    delete,
    func,
    literal,
    literal_column,
    select,
    tuple_,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.errors import (
    InvalidForkPoint,
    PayloadTooLarge,
    SeqConflict,
    SessionAlreadyExists,
    SessionNotFound,
    VersionConflict,
)
from app.runtime.events import Event, NewEvent
from app.runtime.metadata import check_metadata_size, merge_patch
from app.runtime.ports import (
    AppendResult,
    IdempotencyToken,
    NewSession,
    SessionLoad,
    SessionRecord,
    SnapshotRecord,
    TenantCursor,
    TenantPage,
)
from app.runtime.redaction import Redactor
from app.runtime.state import state_hash
from app.store import pg_append
from app.store.base import (
    as_utc,
    event_from_mapping,
    event_from_row,
    note_appended,
    session_from_mapping,
    session_from_row,
    utcnow,
)
from app.store.idempotency import IdempotencyStore, committed_result
from app.store.pgfunctions import EventArrays
from app.store.tables import counters, runs, session_events, session_snapshots, sessions

_POSITION_COUNTER = "event_position"

# The hot statements are built once (with bind parameters), not on every call: building and
# cache-keying a fresh UPDATE cost more than its round trip.
_INSERT_EVENTS = session_events.insert().returning(
    session_events.c.position, sort_by_parameter_order=True
)


def _xact_id_column(postgres: bool) -> Any:
    if postgres:
        return literal_column("pg_current_xact_id()::text::bigint").label("xact_id")
    return literal(None, BigInteger).label("xact_id")


_GET_SESSION = select(sessions).where(
    sessions.c.tenant_id == bindparam("g_tenant"), sessions.c.session_id == bindparam("g_session")
)

# Event's fields, in the order of its constructor's positional arguments.
_EVENT_COLUMNS = tuple(
    session_events.c[name]
    for name in (
        "event_id",
        "session_id",
        "seq",
        "type",
        "payload",
        "created_at",
        "run_id",
        "turn_id",
        "position",
    )
)


_EVENT_COLUMN_LIST = ", ".join(c.name for c in _EVENT_COLUMNS)


@functools.cache
def _list_events_statement(until: bool, types: bool, run: bool, limit: bool) -> Any:
    c = session_events.c
    stmt = select(*_EVENT_COLUMNS).where(
        c.tenant_id == bindparam("l_tenant"),
        c.session_id == bindparam("l_session"),
        c.seq > bindparam("l_after"),
    )
    if until:
        stmt = stmt.where(c.seq <= bindparam("l_until"))
    if types:
        stmt = stmt.where(c.type.in_(bindparam("l_types", expanding=True)))
    if run:
        stmt = stmt.where(c.run_id == bindparam("l_run"))
    stmt = stmt.order_by(c.seq)
    if limit:
        stmt = stmt.limit(bindparam("l_limit"))
    return stmt


def _pg_events_query(
    tenant_id: str,
    session_id: str,
    after_seq: int,
    until_seq: int | None,
    types: list[str] | None,
    run_id: str | None,
    limit: int | None,
) -> tuple[str, list[Any]]:
    """`_list_events_statement` as SQL text with $n parameters, for asyncpg."""
    args: list[Any] = [tenant_id, session_id, after_seq]
    where = ["tenant_id = $1", "session_id = $2", "seq > $3"]
    for column, op, value in (
        ("seq", "<=", until_seq),
        ("type", "= ANY", types or None),
        ("run_id", "=", run_id),
    ):
        if value is not None:
            args.append(value)
            rhs = f"(${len(args)})" if op == "= ANY" else f"${len(args)}"
            where.append(f"{column} {op} {rhs}")
    sql = (
        f"SELECT {_EVENT_COLUMN_LIST} FROM session_events WHERE {' AND '.join(where)} ORDER BY seq"
    )
    if limit is not None:
        args.append(limit)
        sql += f" LIMIT ${len(args)}"
    return sql, args


@functools.cache
def _reserve_statement(postgres: bool, by_seq: bool, by_version: bool) -> Any:
    c = sessions.c
    stmt = update(sessions).where(
        c.tenant_id == bindparam("r_tenant"), c.session_id == bindparam("r_session")
    )
    if by_seq:
        stmt = stmt.where(c.last_seq == bindparam("r_seq"))
    if by_version:
        stmt = stmt.where(c.version == bindparam("r_version"))
    return stmt.values(
        last_seq=c.last_seq + bindparam("r_n", type_=BigInteger),
        version=c.version + 1,
        updated_at=bindparam("r_now", type_=c.updated_at.type),
    ).returning(*c, _xact_id_column(postgres))


class LedgerStore(IdempotencyStore):
    """Tenant-scoped reads and writes of sessions, events and snapshots."""

    max_metadata_bytes: int = 16_384
    max_event_bytes: int = 2_097_152
    redactor: Redactor = Redactor()

    def _persistable(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The funnel every event payload and snapshot state passes through before a write:
        secrets are redacted, and an oversized payload is refused (the transaction rolls
        back, nothing is written)."""
        return self._persistable_json(payload)[0]

    def _persistable_json(self, payload: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """`_persistable`, also returning the JSON text it measured, for a caller that
        sends JSON text itself (the PostgreSQL fast path) and so encodes it only once."""
        clean = self.redactor.value(payload)
        text = json.dumps(clean, separators=(",", ":"), ensure_ascii=False)
        # A UTF-8 character is at most 4 bytes: only a text that might be too big is encoded.
        if len(text) * 4 > self.max_event_bytes:
            size = len(text.encode())
            if size > self.max_event_bytes:
                raise PayloadTooLarge(
                    f"an event of {size} bytes exceeds {self.max_event_bytes} bytes"
                )
        return clean, text

    # ----------------------------------------------------------------- sessions

    async def create_session(
        self,
        tenant_id: str,
        *,
        session: NewSession,
        events: list[NewEvent],
        snapshot: tuple[str, dict[str, Any]] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        """Insert a session row and its first events in one transaction (and the
        Idempotency-Key, when given, see `seal`).

        Raises:
            SessionAlreadyExists: the tenant already has a session with this id.
            IdempotentReplay: a committed duplicate holds the key.
        """
        now = utcnow()
        async with self.write(tenant_id) as conn:
            row = await self._insert_session_row(conn, tenant_id, session, len(events), now)
            if row is None:
                raise SessionAlreadyExists(session.session_id)
            record, xact_id = row
            written = await self._insert_events(conn, record, events, first_seq=1, xact_id=xact_id)
            if snapshot is not None:
                await self._insert_snapshot(conn, record, snapshot[0], snapshot[1], now)
            result = AppendResult(session=record, events=written)
            await self.seal(conn, tenant_id, idempotency, committed_result(result))
        return result

    async def _insert_session_row(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        session: NewSession,
        last_seq: int,
        now: datetime,
    ) -> tuple[SessionRecord, int | None] | None:
        # ON CONFLICT DO NOTHING rather than catching a unique violation: on PostgreSQL the
        # violation would abort the whole transaction, and there is nothing to recover here.
        stmt = (
            self.insert(sessions)
            .values(
                tenant_id=tenant_id,
                session_id=session.session_id,
                root_session_id=session.root_session_id or session.session_id,
                parent_session_id=session.parent_session_id,
                forked_from_seq=session.forked_from_seq,
                status="idle",
                metadata=self.redactor.value(session.metadata),
                agent=self.redactor.value(session.agent),
                binding=self.redactor.value(session.binding),
                last_seq=last_seq,
                version=1,
                active_run_id=None,
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=["tenant_id", "session_id"])
            .returning(*sessions.c, self._xact_id_column())
        )
        row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        return session_from_row(row), row._mapping["xact_id"]

    async def get_session(self, tenant_id: str, session_id: str) -> SessionRecord | None:
        """The session row, or None (also when it belongs to another tenant)."""
        async with self.read(tenant_id) as conn:
            return await self._session(conn, tenant_id, session_id)

    async def _session(
        self, conn: AsyncConnection, tenant_id: str, session_id: str
    ) -> SessionRecord | None:
        params = {"g_tenant": tenant_id, "g_session": session_id}
        row = (await conn.execute(_GET_SESSION, params)).first()
        return session_from_row(row) if row is not None else None

    async def load_session(
        self, tenant_id: str, session_id: str, *, base: tuple[datetime, int] | None = None
    ) -> SessionLoad | None:
        """Everything resuming a session reads, in one read transaction (None: no session).

        `base` is (created_at, seq) of a state the caller already holds (its cache): when it
        belongs to this incarnation of the session and is not ahead of the ledger, only the
        events after it are read; otherwise the newest intact snapshot at or below the last
        seq, and the events after that. One transaction also means one consistent view: the
        row, the snapshot and the tail can never disagree about the last seq.

        On PostgreSQL, the cache's case (a usable `base`) is one call of `asr_session_tail`:
        one round trip, whose tail read is bounded by the last seq of the row it read.
        """
        if base is not None and self.functions is not None:
            row = await self.functions.session_tail(tenant_id, session_id, *base)
            if not row["o_found"]:
                return None
            if row["o_events"] is not None:
                tail = [event_from_mapping(e) for e in row["o_events"]]
                record = session_from_mapping(row["o_session"])
                return SessionLoad(session=record, from_base=True, snapshot=None, tail=tail)
        async with self.read(tenant_id) as conn:
            record = await self._session(conn, tenant_id, session_id)
            if record is None:
                return None
            snapshot = None
            if base is not None and base[0] == record.created_at and base[1] <= record.last_seq:
                from_base, after = True, base[1]
            else:
                snapshot = await self._intact_snapshot(conn, tenant_id, session_id, record.last_seq)
                from_base, after = False, (snapshot.seq if snapshot is not None else 0)
            tail = []
            if after < record.last_seq:
                tail = await self._events(
                    conn, tenant_id, session_id, after_seq=after, until_seq=record.last_seq
                )
        return SessionLoad(session=record, from_base=from_base, snapshot=snapshot, tail=tail)

    async def list_sessions(
        self,
        tenant_id: str,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        status: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> list[SessionRecord]:
        """Newest first, keyset-paginated on (created_at, session_id)."""
        stmt = select(sessions).where(sessions.c.tenant_id == tenant_id)
        if after is not None:
            stmt = stmt.where(tuple_(sessions.c.created_at, sessions.c.session_id) < tuple_(*after))
        if status is not None:
            stmt = stmt.where(sessions.c.status == status)
        for key, value in (metadata or {}).items():
            stmt = stmt.where(sessions.c.metadata[key].as_string() == value)
        stmt = stmt.order_by(sessions.c.created_at.desc(), sessions.c.session_id.desc())
        async with self.read(tenant_id) as conn:
            rows = (await conn.execute(stmt.limit(limit))).all()
        return [session_from_row(r) for r in rows]

    async def count_sessions(self, tenant_id: str) -> int:
        async with self.read(tenant_id) as conn:
            stmt = (
                select(func.count()).select_from(sessions).where(sessions.c.tenant_id == tenant_id)
            )
            return int((await conn.execute(stmt)).scalar_one())

    async def delete_session(self, tenant_id: str, session_id: str) -> bool:
        """Erase the session, its events and its snapshots. False if there was none."""
        key = (tenant_id, session_id)
        async with self.write(tenant_id) as conn:
            for table in (session_events, session_snapshots, runs):
                await conn.execute(
                    delete(table).where(table.c.tenant_id == key[0], table.c.session_id == key[1])
                )
            result = await conn.execute(
                delete(sessions).where(
                    sessions.c.tenant_id == key[0], sessions.c.session_id == key[1]
                )
            )
        return result.rowcount > 0

    # ------------------------------------------------------------------- events

    async def append_events(
        self,
        tenant_id: str,
        session_id: str,
        *,
        events: list[NewEvent],
        expected_seq: int | None = None,
        expected_version: int | None = None,
        metadata_patch: dict[str, Any] | None = None,
        snapshot: tuple[str, dict[str, Any]] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        """Append `events` atomically and return them with their seqs.

        Args:
            expected_seq: if given, the append happens only when the session's last seq is
                exactly this (optimistic concurrency); otherwise nothing is written.
            expected_version: likewise for the session version (If-Match).
            metadata_patch: an RFC 7386 merge patch applied to the metadata under the lock.
            snapshot: (kind, state JSON) of the fold at the new last seq, written in the same
                transaction; needs `expected_seq`, since only then is that fold known.
            idempotency: the request's Idempotency-Key, recorded in the same transaction.

        Raises:
            SessionNotFound, SeqConflict, VersionConflict, IdempotentReplay.
        """
        if snapshot is not None and expected_seq is None:
            raise ValueError("a snapshot in an append needs expected_seq")
        if self.is_postgres and metadata_patch is None and snapshot is None:
            # The common append: one call of the server-side function (pg_append.py). Events
            # are redacted and size-checked before anything is sent, as below.
            return await pg_append.append(
                self,
                tenant_id,
                session_id,
                EventArrays.of(events, self._persistable_json),
                expected_seq=expected_seq,
                expected_version=expected_version,
                idempotency=idempotency,
            )
        n = len(events)
        async with self.write(tenant_id) as conn:
            record, xact_id = await self._reserve(
                conn, tenant_id, session_id, n, expected_seq, expected_version
            )
            if metadata_patch is not None:
                record = await self._patch_metadata(conn, record, metadata_patch)
            written = await self._insert_events(
                conn, record, events, first_seq=record.last_seq - n + 1, xact_id=xact_id
            )
            if snapshot is not None:
                await self._insert_snapshot(conn, record, snapshot[0], snapshot[1], utcnow())
            result = AppendResult(session=record, events=written)
            await self.seal(conn, tenant_id, idempotency, committed_result(result))
        return result

    async def _reserve(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        session_id: str,
        n: int,
        expected_seq: int | None,
        expected_version: int | None,
    ) -> tuple[SessionRecord, int | None]:
        # This UPDATE takes the session row lock and reserves last_seq-n+1 .. last_seq in one
        # round trip; the events inserted after it in this transaction use exactly that range.
        stmt = _reserve_statement(
            self.is_postgres, expected_seq is not None, expected_version is not None
        )
        params = {
            "r_tenant": tenant_id,
            "r_session": session_id,
            "r_seq": expected_seq,
            "r_version": expected_version,
            "r_n": n,
            "r_now": utcnow(),
        }
        row = (await conn.execute(stmt, params)).first()
        if row is not None:
            return session_from_row(row), row._mapping["xact_id"]
        current = (
            await conn.execute(
                select(sessions.c.last_seq, sessions.c.version).where(
                    sessions.c.tenant_id == tenant_id, sessions.c.session_id == session_id
                )
            )
        ).first()
        if current is None:
            raise SessionNotFound(session_id)
        if expected_version is not None and current.version != expected_version:
            raise VersionConflict(expected_version, current.version)
        raise SeqConflict(expected_seq or 0, current.last_seq)

    async def _patch_metadata(
        self, conn: AsyncConnection, record: SessionRecord, patch: dict[str, Any]
    ) -> SessionRecord:
        merged = self.redactor.value(merge_patch(record.metadata, patch))
        check_metadata_size(merged, limit=self.max_metadata_bytes)
        await conn.execute(
            update(sessions)
            .where(
                sessions.c.tenant_id == record.tenant_id,
                sessions.c.session_id == record.session_id,
            )
            .values(metadata=merged)
        )
        return replace(record, metadata=merged)

    async def _insert_events(
        self,
        conn: AsyncConnection,
        session: SessionRecord,
        events: list[NewEvent],
        *,
        first_seq: int,
        xact_id: int | None,
    ) -> list[Event]:
        if not events:
            return []
        self.touch(conn, session.tenant_id, session.session_id, session.last_seq)
        # Counted for metrics once the transaction commits (see StoreBase.write); a fork's
        # copied prefix (_copy_events) is not new and is not counted.
        note_appended(conn, [str(e.type) for e in events])
        now = utcnow()
        rows = [
            {
                "tenant_id": session.tenant_id,
                "session_id": session.session_id,
                "seq": first_seq + i,
                "event_id": str(uuid.uuid4()),
                "xact_id": xact_id,
                "type": str(e.type),
                "run_id": e.run_id,
                "turn_id": e.turn_id,
                "payload": self._persistable(e.payload),
                "created_at": now,
            }
            for i, e in enumerate(events)
        ]
        if not self.is_postgres:
            top = await self._reserve_positions(conn, len(rows))
            for i, r in enumerate(rows):
                r["position"] = top - len(rows) + 1 + i
        positions = (await conn.execute(_INSERT_EVENTS, rows)).scalars().all()
        return [
            Event(
                event_id=r["event_id"],
                session_id=r["session_id"],
                seq=r["seq"],
                type=r["type"],
                payload=r["payload"],
                created_at=now,
                run_id=r["run_id"],
                turn_id=r["turn_id"],
                position=p,
            )
            for r, p in zip(rows, positions, strict=True)
        ]

    async def _reserve_positions(self, conn: AsyncConnection, n: int) -> int:
        """SQLite only: reserve `n` global positions and return the highest."""
        stmt = (
            self.insert(counters)
            .values(name=_POSITION_COUNTER, value=n)
            .on_conflict_do_update(index_elements=["name"], set_={"value": counters.c.value + n})
            .returning(counters.c.value)
        )
        return int((await conn.execute(stmt)).scalar_one())

    def _xact_id_column(self) -> Any:
        return _xact_id_column(self.is_postgres)

    async def list_events(
        self,
        tenant_id: str,
        session_id: str,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        types: list[str] | None = None,
        run_id: str | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """Events in seq order; filters combine with AND."""
        async with self.read(tenant_id) as conn:
            return await self._events(
                conn,
                tenant_id,
                session_id,
                after_seq=after_seq,
                until_seq=until_seq,
                types=types,
                run_id=run_id,
                limit=limit,
            )

    async def _events(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        session_id: str,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        types: list[str] | None = None,
        run_id: str | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        if self.is_postgres:
            # The bare driver inside the same transaction: no SQLAlchemy row processing on
            # the one read whose size grows with the ledger (full histories, long tails).
            sql, args = _pg_events_query(
                tenant_id, session_id, after_seq, until_seq, types, run_id, limit
            )
            driver = (await conn.get_raw_connection()).driver_connection
            return [Event(*row) for row in await driver.fetch(sql, *args)]
        stmt = _list_events_statement(
            until_seq is not None, bool(types), run_id is not None, limit is not None
        )
        params = {
            "l_tenant": tenant_id,
            "l_session": session_id,
            "l_after": after_seq,
            "l_until": until_seq,
            "l_types": types,
            "l_run": run_id,
            "l_limit": limit,
        }
        rows = (await conn.execute(stmt, params)).all()
        return [Event(e, s, q, t, p, as_utc(c), r, u, n) for e, s, q, t, p, c, r, u, n in rows]

    async def list_tenant_events(
        self,
        tenant_id: str,
        *,
        after: TenantCursor,
        types: list[str] | None = None,
        limit: int = 500,
    ) -> TenantPage:
        """Events of every session of the tenant after `after`, in commit-safe order.

        PostgreSQL: positions come from an identity, which is not commit order, so rows are
        read in (xact_id, position) order and passed only while their transaction is older
        than the oldest one still running (`pg_snapshot_xmin`). Such a prefix can no longer
        grow, so a cursor never steps over a row that commits late. SQLite: one writer at a
        time, so position order is commit order.
        """
        ev = session_events.c
        stmt = select(session_events).where(ev.tenant_id == tenant_id)
        if types:
            stmt = stmt.where(ev.type.in_(types))
        if not self.is_postgres:
            stmt = stmt.where(ev.position > after.position).order_by(ev.position).limit(limit)
            async with self.read(tenant_id) as conn:
                rows = (await conn.execute(stmt)).all()
            entries = [(event_from_row(r), TenantCursor(0, r.position)) for r in rows]
            return TenantPage(entries=entries, more=len(rows) == limit, pending=False)
        safe_below = literal_column("pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        stmt = (
            stmt.add_columns(safe_below.label("safe_below"))
            .where(tuple_(ev.xact_id, ev.position) > tuple_(after.xact_id, after.position))
            .order_by(ev.xact_id, ev.position)
            .limit(limit + 1)
        )
        async with self.read(tenant_id) as conn:
            rows = (await conn.execute(stmt)).all()
        safe = [r for r in rows if r.xact_id < r.safe_below]  # a prefix: ordered by xact_id
        entries = [(event_from_row(r), TenantCursor(r.xact_id, r.position)) for r in safe]
        return TenantPage(
            entries=entries[:limit],
            more=len(safe) > limit,
            pending=len(safe) < len(rows),
        )

    # -------------------------------------------------------------------- forks

    async def fork_session(
        self,
        tenant_id: str,
        source_session_id: str,
        *,
        at_seq: int,
        session: NewSession,
        events: list[NewEvent],
        snapshot_state: dict[str, Any],
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        """Create `session` whose ledger starts as a copy of the source's events 1..at_seq.

        The copy is one server-side INSERT ... SELECT (no rows travel to Python), the child's
        own `events` follow at at_seq+1.., and a `fork` snapshot of the child's state at its
        last seq is written in the same transaction. The source is only read.

        Raises:
            SessionNotFound, InvalidForkPoint, SessionAlreadyExists.
        """
        now = utcnow()
        async with self.write(tenant_id) as conn:
            source = (
                await conn.execute(
                    select(sessions.c.last_seq, sessions.c.root_session_id).where(
                        sessions.c.tenant_id == tenant_id,
                        sessions.c.session_id == source_session_id,
                    )
                )
            ).first()
            if source is None:
                raise SessionNotFound(source_session_id)
            if not 0 <= at_seq <= source.last_seq:
                raise InvalidForkPoint(
                    f"at_seq must be between 0 and {source.last_seq}",
                    last_seq=source.last_seq,
                )
            child = NewSession(
                session_id=session.session_id,
                metadata=session.metadata,
                agent=session.agent,
                binding=session.binding,
                root_session_id=source.root_session_id,
                parent_session_id=source_session_id,
                forked_from_seq=at_seq,
            )
            inserted = await self._insert_session_row(
                conn, tenant_id, child, at_seq + len(events), now
            )
            if inserted is None:
                raise SessionAlreadyExists(session.session_id)
            record, xact_id = inserted
            await self._copy_events(conn, tenant_id, source_session_id, record, at_seq, xact_id)
            written = await self._insert_events(
                conn, record, events, first_seq=at_seq + 1, xact_id=xact_id
            )
            await self._insert_snapshot(conn, record, "fork", snapshot_state, now)
            # Only the child's own events count as appended; the copied prefix is not new.
            result = AppendResult(session=record, events=written)
            await self.seal(conn, tenant_id, idempotency, committed_result(result))
        return result

    async def _copy_events(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        source_id: str,
        child: SessionRecord,
        at_seq: int,
        xact_id: int | None,
    ) -> None:
        if at_seq == 0:
            return
        self.touch(conn, tenant_id, child.session_id, child.last_seq)
        src = session_events.c
        columns = [
            "tenant_id",
            "session_id",
            "seq",
            "event_id",
            "xact_id",
            "type",
            "run_id",
            "turn_id",
            "payload",
            "created_at",
        ]
        if self.is_postgres:
            new_id: Any = func.gen_random_uuid().cast(Text)
        else:
            new_id = func.asr_uuid4()
        selected = [
            src.tenant_id,
            literal(child.session_id),
            src.seq,
            new_id,
            literal(xact_id, BigInteger),
            src.type,
            src.run_id,
            src.turn_id,
            src.payload,
            src.created_at,
        ]
        if not self.is_postgres:
            # Events 1..at_seq get positions base+1 .. base+at_seq, in seq order.
            base = await self._reserve_positions(conn, at_seq) - at_seq
            columns.append("position")
            selected.append(literal(base, BigInteger) + src.seq)
        query = (
            select(*selected)
            .where(
                src.tenant_id == tenant_id,
                src.session_id == source_id,
                src.seq <= at_seq,
            )
            .order_by(src.seq)
        )
        await conn.execute(session_events.insert().from_select(columns, query))

    # ---------------------------------------------------------------- snapshots

    async def _insert_snapshot(
        self,
        conn: AsyncConnection,
        session: SessionRecord,
        kind: str,
        state: dict[str, Any],
        now: datetime,
    ) -> None:
        if state.get("seq") != session.last_seq:
            raise ValueError("a snapshot must be the fold at the session's last seq")
        state = self.redactor.value(state)
        await conn.execute(
            session_snapshots.insert().values(
                tenant_id=session.tenant_id,
                session_id=session.session_id,
                seq=session.last_seq,
                kind=kind,
                state=state,
                state_hash=state_hash(state),
                created_at=now,
            )
        )

    async def save_snapshot(
        self, tenant_id: str, session_id: str, *, seq: int, kind: str, state: dict[str, Any]
    ) -> bool:
        """Write a snapshot of already-committed events; False if one exists at that seq.

        Used for automatic snapshots, which are computed from committed rows and so can never
        claim a seq whose events are not committed.
        """
        if state.get("seq") != seq:
            raise ValueError("snapshot state seq differs from its row seq")
        state = self.redactor.value(state)
        async with self.write(tenant_id) as conn:
            exists = (
                await conn.execute(
                    select(sessions.c.last_seq).where(
                        sessions.c.tenant_id == tenant_id, sessions.c.session_id == session_id
                    )
                )
            ).first()
            if exists is None or exists.last_seq < seq:
                return False
            result = await conn.execute(
                self.insert(session_snapshots)
                .values(
                    tenant_id=tenant_id,
                    session_id=session_id,
                    seq=seq,
                    kind=kind,
                    state=state,
                    state_hash=state_hash(state),
                    created_at=utcnow(),
                )
                .on_conflict_do_nothing()
            )
        return result.rowcount > 0

    async def get_snapshot(
        self, tenant_id: str, session_id: str, *, at_or_below: int | None = None
    ) -> SnapshotRecord | None:
        """The newest intact snapshot at or below `at_or_below` (default: any).

        A row whose content hash does not match is skipped, so a torn or tampered snapshot
        falls back to an older one (or to a full fold) instead of resuming wrong state.
        """
        async with self.read(tenant_id) as conn:
            return await self._intact_snapshot(conn, tenant_id, session_id, at_or_below)

    async def _intact_snapshot(
        self, conn: AsyncConnection, tenant_id: str, session_id: str, at_or_below: int | None
    ) -> SnapshotRecord | None:
        snap = session_snapshots.c
        stmt = select(session_snapshots).where(
            snap.tenant_id == tenant_id, snap.session_id == session_id
        )
        if at_or_below is not None:
            stmt = stmt.where(snap.seq <= at_or_below)
        stmt = stmt.order_by(snap.seq.desc()).limit(8)
        rows = (await conn.execute(stmt)).all()
        for row in rows:
            m = row._mapping
            if state_hash(m["state"]) == m["state_hash"]:
                return SnapshotRecord(
                    session_id=session_id,
                    seq=m["seq"],
                    kind=m["kind"],
                    state=m["state"],
                    created_at=as_utc(m["created_at"]),
                )
        return None

    async def list_snapshots(self, tenant_id: str, session_id: str) -> list[SnapshotRecord]:
        """Every snapshot of a session, oldest first (state included)."""
        snap = session_snapshots.c
        async with self.read(tenant_id) as conn:
            rows = (
                await conn.execute(
                    select(session_snapshots)
                    .where(snap.tenant_id == tenant_id, snap.session_id == session_id)
                    .order_by(snap.seq)
                )
            ).all()
        return [
            SnapshotRecord(
                session_id=session_id,
                seq=r._mapping["seq"],
                kind=r._mapping["kind"],
                state=r._mapping["state"],
                created_at=as_utc(r._mapping["created_at"]),
            )
            for r in rows
        ]
