"""Sessions, their event ledger and their snapshots: what both backends share.

The one rule every write keeps (each backend's class implements the writes: SQLAlchemy
statements on SQLite, stored functions on PostgreSQL): a session's `seq` is assigned in the
same transaction that inserts the events, after locking the session row with the UPDATE
that bumps `last_seq`. Concurrent writers on one session therefore queue on that row lock
(PostgreSQL) or on the single writer (SQLite), and seqs come out 1..N with no gap and no
duplicate. There is no `SELECT max(seq) + 1` and no table lock anywhere.

Here: the reads, which are the same SQL on both databases. The funnel every payload
passes before a write (redaction, size) is `app.store.payloads`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import Text, bindparam, cast, delete, func, select, tuple_, type_coerce
from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.ports import (
    AppendResult,
    HeldSession,
    IdempotencyToken,
    NewSession,
    PruneFacts,
    PruneOutcome,
    SessionLoad,
    SessionRecord,
    SnapshotRecord,
    TenantCursor,
    TenantPage,
)
from app.runtime.session.events import Event, NewEvent
from app.store.base import EVENT_FIELDS, Database, as_utc, session_from_row, utcnow
from app.store.idempotency import IdempotencyStore
from app.store.json_text import loads
from app.store.payloads import Payloads
from app.store.snapshot_text import intact_stored_state, snapshot_text
from app.store.tables import runs, session_events, session_snapshots, sessions

_GET_SESSION = select(sessions).where(
    sessions.c.tenant_id == bindparam("g_tenant"), sessions.c.session_id == bindparam("g_session")
)

# Event's fields are session_events' columns of the same names, in its constructor's order.
EVENT_COLUMN_LIST = ", ".join(session_events.c[name].name for name in EVENT_FIELDS)

HISTORY_PRUNED = "HISTORY_PRUNED"
# How many snapshots below the bound a prune looks at for one it may cut at.
_PRUNE_CANDIDATES = 8
# How many of the newest snapshots a load tries before it folds from the ledger's start.
_SNAPSHOT_CANDIDATES = 8
_T = TypeVar("_T")


class SnapshotRow(NamedTuple):
    """A snapshot as read, before its state is decoded and checked (`intact_stored_state`)."""

    seq: int
    kind: str
    text: str | bytes
    state_hash: str
    created_at: datetime


async def read_session(
    conn: AsyncConnection, tenant_id: str, session_id: str
) -> SessionRecord | None:
    """The session row, read in the open transaction `conn` (None: no such session)."""
    params = {"g_tenant": tenant_id, "g_session": session_id}
    row = (await conn.execute(_GET_SESSION, params)).first()
    return session_from_row(row) if row is not None else None


class LedgerStore(ABC):
    """Tenant-scoped sessions, their events and snapshots: the reads (the same SQL on both
    databases) here, the writes that insert events and the hold in each backend's class
    (`SqliteLedger`, `PostgresLedger`)."""

    def __init__(self, db: Database, payloads: Payloads, idempotency: IdempotencyStore) -> None:
        self.db = db
        self.payloads = payloads
        self.idempotency = idempotency

    # The writes that insert events, the hold, and the tenant timeline: each backend's own.

    @abstractmethod
    def hold(self, tenant_id: str, session_id: str) -> AbstractAsyncContextManager[HeldSession]:
        """Hold the session against every other writer until the block ends (see
        `app.runtime.ports.LedgerPort.hold`)."""

    @abstractmethod
    async def create_session(
        self,
        tenant_id: str,
        *,
        session: NewSession,
        events: list[NewEvent],
        snapshot: tuple[str, dict[str, Any]] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        """A new session with its first events (and a snapshot at their end)."""

    @abstractmethod
    async def fork_session(
        self,
        tenant_id: str,
        source_session_id: str,
        *,
        at_seq: int,
        session: NewSession,
        events: list[NewEvent],
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        """A child whose ledger is a copy of the source's events 1..at_seq, then `events`."""

    @abstractmethod
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
        """Events after the session's last seq, with the row's seq reserved first."""

    @abstractmethod
    async def list_tenant_events(
        self,
        tenant_id: str,
        *,
        after: TenantCursor,
        types: list[str] | None = None,
        limit: int = 500,
    ) -> TenantPage:
        """Events of every session of the tenant after `after`, in the timeline's order."""

    # ----------------------------------------------------------------- sessions

    async def get_session(self, tenant_id: str, session_id: str) -> SessionRecord | None:
        """The session row, or None (also when it belongs to another tenant).

        Read on the primary; its `last_seq` then fences this process's reads of the session
        on a read replica (a stream that read the head here replays at least up to it)."""
        async with self.db.read(tenant_id) as conn:
            record = await self._session(conn, tenant_id, session_id)
        if record is not None:
            self.db.heads.read(tenant_id, session_id, record.last_seq)
        return record

    async def _session(
        self, conn: AsyncConnection, tenant_id: str, session_id: str
    ) -> SessionRecord | None:
        return await read_session(conn, tenant_id, session_id)

    async def load_session(
        self,
        tenant_id: str,
        session_id: str,
        *,
        base: tuple[datetime, int] | None = None,
        lagging: bool = False,
    ) -> SessionLoad | None:
        """Everything resuming a session reads, in one read transaction (None: no session).

        `base` is (created_at, seq) of a state the caller already holds (its cache): when it
        belongs to this incarnation of the session and is not ahead of the ledger, only the
        events after it are read; otherwise the newest intact snapshot at or below the last
        seq, and the events after that. One transaction also means one consistent view: the
        row, the snapshot and the tail can never disagree about the last seq.

        `lagging`: a load for display only (no write is decided on it), which a read replica
        may serve under the session's fence (`Database.read_lagging`).
        """

        async def load(conn: AsyncConnection) -> SessionLoad | None:
            record = await self._session(conn, tenant_id, session_id)
            if record is None:
                return None
            return await self._load(conn, record, base)

        if lagging:
            fence = base[1] if base is not None else 0
            return await self.db.read_lagging(tenant_id, load, session_id=session_id, fence=fence)
        async with self.db.read(tenant_id) as conn:
            return await load(conn)

    async def _load(
        self, conn: AsyncConnection, record: SessionRecord, base: tuple[datetime, int] | None
    ) -> SessionLoad:
        """`load_session`'s snapshot and tail for `record`, as read on `conn`."""
        tenant_id, session_id = record.tenant_id, record.session_id
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
        if from_base and tail and tail[0].type == HISTORY_PRUNED:
            # The caller's state predates a prune (another replica's): the events between
            # it and the marker are gone, so the tail cannot go on it. From the snapshot.
            return await self._load(conn, record, None)
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

        async def page(conn: AsyncConnection) -> list[SessionRecord]:
            rows = (await conn.execute(stmt.limit(limit))).all()
            return [session_from_row(r) for r in rows]

        # A list tolerates lag: a read replica may serve it, fenced by the tenant's latest
        # commit this process knows of (`Database.read_lagging`).
        return await self.db.read_lagging(tenant_id, page)

    async def count_sessions(self, tenant_id: str) -> int:
        async with self.db.read(tenant_id) as conn:
            stmt = (
                select(func.count()).select_from(sessions).where(sessions.c.tenant_id == tenant_id)
            )
            return int((await conn.execute(stmt)).scalar_one())

    async def delete_session(self, tenant_id: str, session_id: str) -> bool:
        """Erase the session, its events and its snapshots. False if there was none."""
        key = (tenant_id, session_id)
        async with self.db.write(tenant_id) as conn:
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
        """Events in seq order; filters combine with AND.

        A page tolerates lag (a caller reads on from its last seq), so a read replica may
        serve it, fenced by the seqs the caller names (`after_seq` it has seen, `until_seq`
        it knows exists) and the session's head this process knows of: the page never ends
        before what the caller already saw (`Database.read_lagging`)."""

        async def page(conn: AsyncConnection) -> list[Event]:
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

        fence = max(after_seq, until_seq or 0)
        return await self.db.read_lagging(tenant_id, page, session_id=session_id, fence=fence)

    @abstractmethod
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
        """The events of `list_events`, inside the read transaction `conn`: each backend
        reads them with its bare driver (`EVENT_COLUMN_LIST`), since SQLAlchemy's per-row
        processing was most of a long read."""

    # ---------------------------------------------------------------- snapshots

    async def save_snapshot(
        self, tenant_id: str, session_id: str, *, seq: int, kind: str, state: dict[str, Any]
    ) -> bool:
        """Write a snapshot of already-committed events; False if one exists at that seq.

        Used for automatic snapshots, which are computed from committed rows and so can never
        claim a seq whose events are not committed.
        """
        if state.get("seq") != seq:
            raise ValueError("snapshot state seq differs from its row seq")
        state = self.payloads.redact(state)
        async with self.db.write(tenant_id) as conn:
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
                self.db.insert(session_snapshots)
                .values(
                    tenant_id=tenant_id,
                    session_id=session_id,
                    seq=seq,
                    kind=kind,
                    **self._snapshot_columns(state),
                    created_at=utcnow(),
                )
                .on_conflict_do_nothing()
            )
        return result.rowcount > 0

    def _snapshot_columns(self, state: dict[str, Any]) -> dict[str, Any]:
        """A redacted state's `state` and `state_hash` columns: the text whose bytes the hash
        is of, where that reads back exactly (`snapshot_text`), so a load checks the hash on
        the bytes it reads."""
        text, digest = snapshot_text(state)
        return {"state": type_coerce(text, Text), "state_hash": digest}

    async def get_snapshot(
        self, tenant_id: str, session_id: str, *, at_or_below: int | None = None
    ) -> SnapshotRecord | None:
        """The newest intact snapshot at or below `at_or_below` (default: any).

        A row whose content hash does not match is skipped, so a torn or tampered snapshot
        falls back to an older one (or to a full fold) instead of resuming wrong state.
        """
        async with self.db.read(tenant_id) as conn:
            return await self._intact_snapshot(conn, tenant_id, session_id, at_or_below)

    async def _intact_snapshot(
        self, conn: AsyncConnection, tenant_id: str, session_id: str, at_or_below: int | None
    ) -> SnapshotRecord | None:
        """The newest of the (at most `_SNAPSHOT_CANDIDATES`) newest snapshots whose state
        matches its hash, read one row at a time: a state may be megabytes, and the older
        rows are needed only when a newer one is torn. The state is read as text and
        decoded here (`intact_stored_state`)."""
        bound = at_or_below
        for _ in range(_SNAPSHOT_CANDIDATES):
            row = await self._snapshot_row(conn, tenant_id, session_id, bound)
            if row is None:
                return None
            state = self._decoded_state(row)
            if state is not None:
                return SnapshotRecord(
                    session_id=session_id,
                    seq=row.seq,
                    kind=row.kind,
                    state=state,
                    created_at=as_utc(row.created_at),
                )
            bound = row.seq - 1
        return None

    @staticmethod
    def _decoded_state(row: SnapshotRow) -> dict[str, Any] | None:
        """`row`'s state when it matches its hash."""
        return intact_stored_state(row.text, row.state_hash)

    async def _snapshot_row(
        self, conn: AsyncConnection, tenant_id: str, session_id: str, bound: int | None
    ) -> SnapshotRow | None:
        """The newest snapshot row at or below `bound` (None: any), its state as JSON text."""
        snap = session_snapshots.c
        stmt = select(
            snap.seq, snap.kind, cast(snap.state, Text).label("text"), snap.state_hash,
            snap.created_at,
        ).where(snap.tenant_id == tenant_id, snap.session_id == session_id)  # fmt: skip
        if bound is not None:
            stmt = stmt.where(snap.seq <= bound)
        row = (await conn.execute(stmt.order_by(snap.seq.desc()).limit(1))).first()
        return SnapshotRow(*row) if row is not None else None

    async def list_snapshots(self, tenant_id: str, session_id: str) -> list[SnapshotRecord]:
        """Every snapshot of a session, oldest first (state included)."""
        snap = session_snapshots.c
        async with self.db.read(tenant_id) as conn:
            rows = (
                await conn.execute(
                    select(
                        snap.seq, snap.kind, cast(snap.state, Text).label("text"), snap.created_at
                    )
                    .where(snap.tenant_id == tenant_id, snap.session_id == session_id)
                    .order_by(snap.seq)
                )
            ).all()
        return [
            SnapshotRecord(
                session_id=session_id,
                seq=r.seq,
                kind=r.kind,
                state=loads(r.text),
                created_at=as_utc(r.created_at),
            )
            for r in rows
        ]

    # ------------------------------------------------------------------ pruning

    @abstractmethod
    async def _prune_transaction(
        self, tenant_id: str, work: Callable[[AsyncConnection], Coroutine[Any, Any, _T]]
    ) -> _T:
        """Run `work` in one write transaction of the backend's one write path."""

    @abstractmethod
    async def _insert_marker(
        self, conn: AsyncConnection, record: SessionRecord, seq: int, marker: NewEvent
    ) -> None:
        """Insert `marker` at `seq` (freed by the prune) with the backend's event insert."""

    async def prune_session(
        self,
        tenant_id: str,
        session_id: str,
        *,
        decide: Callable[[PruneFacts], int | str],
        mark: Callable[[PruneFacts, int, int], NewEvent],
        dry_run: bool = False,
    ) -> PruneOutcome | None:
        """`LedgerPort.prune_session`: the facts, the decision and the deletes all under the
        session row's lock (`FOR UPDATE SKIP LOCKED` on PostgreSQL, so two replicas' passes
        never prune one session at once; SQLite's single writer serialises them)."""

        async def work(conn: AsyncConnection) -> PruneOutcome | None:
            facts = await self._prune_facts(conn, tenant_id, session_id)
            if facts is None:
                return None
            decided = decide(facts)
            if isinstance(decided, str):
                return PruneOutcome(session_id, None, 0, 0, decided, dry_run)
            cut = decided
            ev, snap = session_events.c, session_snapshots.c
            mine_ev = (ev.tenant_id == tenant_id, ev.session_id == session_id)
            mine_snap = (snap.tenant_id == tenant_id, snap.session_id == session_id)
            counted = await conn.execute(
                select(func.count()).where(*mine_ev, ev.seq <= cut, ev.type != HISTORY_PRUNED)
            )
            n = int(counted.scalar_one())
            snaps = await conn.execute(select(func.count()).where(*mine_snap, snap.seq < cut))
            n_snaps = int(snaps.scalar_one())
            if dry_run:
                return PruneOutcome(session_id, cut, n, n_snaps, "would_prune", True)
            marker = mark(facts, cut, n)
            await conn.execute(delete(session_events).where(*mine_ev, ev.seq <= cut))
            await conn.execute(delete(session_snapshots).where(*mine_snap, snap.seq < cut))
            await self._insert_marker(conn, facts.session, cut, marker)
            return PruneOutcome(session_id, cut, n, n_snaps, "pruned", False)

        return await self._prune_transaction(tenant_id, work)

    async def _prune_facts(
        self, conn: AsyncConnection, tenant_id: str, session_id: str
    ) -> PruneFacts | None:
        row = (
            await conn.execute(
                select(sessions)
                .where(sessions.c.tenant_id == tenant_id, sessions.c.session_id == session_id)
                .with_for_update(skip_locked=True)
            )
        ).first()
        if row is None:
            return None
        record = session_from_row(row)
        ev, snap = session_events.c, session_snapshots.c
        first = (
            await conn.execute(
                select(ev.seq, ev.type, ev.payload)
                .where(ev.tenant_id == tenant_id, ev.session_id == session_id)
                .order_by(ev.seq)
                .limit(1)
            )
        ).first()
        start = int(first.seq) if first is not None else record.last_seq + 1
        marker = dict(first.payload) if first is not None and first.type == HISTORY_PRUNED else None
        run_first = None
        if record.active_run_id is not None:
            found = (
                await conn.execute(
                    select(runs.c.first_seq).where(
                        runs.c.tenant_id == tenant_id, runs.c.run_id == record.active_run_id
                    )
                )
            ).first()
            # A run that has not written yet needs nothing of the ledger's past but its end.
            run_first = int(found.first_seq) if found and found.first_seq else record.last_seq + 1
        bound = run_first if run_first is not None else record.last_seq + 1
        rows = await conn.execute(
            select(snap.seq, cast(snap.state, Text).label("text"), snap.state_hash)
            .where(snap.tenant_id == tenant_id, snap.session_id == session_id, snap.seq < bound)
            .order_by(snap.seq.desc())
            .limit(_PRUNE_CANDIDATES)
        )
        intact = ((int(r.seq), intact_stored_state(r.text, r.state_hash)) for r in rows.all())
        candidates = [(seq, state) for seq, state in intact if state is not None]
        return PruneFacts(
            session=record,
            history_start=start,
            marker=marker,
            run_first_seq=run_first,
            snapshots=candidates,
        )
