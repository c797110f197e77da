"""`Jobs`: the writes that insert events, as jobs of SQLite's one writer connection.

The ledger's and the runs' writes (`SqliteLedger`, `SqliteRuns`) share them: a job runs in
a committed transaction of the writer (`run`), and inserts its events with `insert_events`,
which numbers their global positions from the one-row `counters` table (under the single
writer, position order is commit order).
"""

from __future__ import annotations

import functools
from operator import attrgetter
from types import SimpleNamespace
from typing import Any, TypeVar, cast

from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.ports import SessionRecord
from app.runtime.session.events import Event, NewEvent
from app.store.base import APPENDED, EVENT_FIELDS, note_appended, utcnow
from app.store.ledger import EVENT_COLUMN_LIST
from app.store.payloads import Payloads, new_event_ids
from app.store.sqlite.database import SqliteDatabase
from app.store.sqlite.writer import Done, Job, JobOf, driver, sqlite_time
from app.store.tables import sessions
from app.tracing import span

_T = TypeVar("_T")
_POSITION_COUNTER = "event_position"

# The statements every append runs are plain SQL on the writer's driver connection
# (writer.py): SQLAlchemy's per-statement work (cache keys, bind and result processing) was
# most of an append's CPU. They store what SQLAlchemy's types store (JSON text, the
# DATETIME text of `sqlite_time`), so every other read and write sees the same rows.
# An event row is its tenant and its Event's fields (EVENT_FIELDS, the columns of the same
# names), the payload as JSON text and the time as `sqlite_time`'s text: a new event column
# (a field of Event) needs nothing here.
_INSERT_EVENT_ROW = (
    f"INSERT INTO session_events (tenant_id, {EVENT_COLUMN_LIST})"
    f" VALUES ({', '.join('?' * (1 + len(EVENT_FIELDS)))})"
)
_EVENT_VALUES = attrgetter(*EVENT_FIELDS)
PAYLOAD = EVENT_FIELDS.index("payload")
CREATED_AT = EVENT_FIELDS.index("created_at")
SESSION_COLUMNS = ", ".join(c.name for c in sessions.c)
# What every write that inserts events sets on its session row: `n` more seqs, a new version.
RESERVE_SET = "last_seq = last_seq + :n, version = version + 1, updated_at = :now"
_RESERVE_POSITIONS = (
    "INSERT INTO counters (name, value) VALUES (?1, ?2)"
    " ON CONFLICT (name) DO UPDATE SET value = value + ?2 RETURNING value"
)


@functools.cache
def reserve_sql(*, by_seq: bool = False, by_version: bool = False, freeing: bool = False) -> str:
    """The UPDATE of the session row that reserves a write's seqs, returning the row (every
    column, for `session_from_tuple`). Named parameters: n, now, tenant, session; seq and
    version when the write is conditional on them (`by_seq`, `by_version`); run when
    `freeing`: the session is then also freed, in the same UPDATE, if (and only if) that
    run still holds it (a run's last write)."""
    sets = RESERVE_SET
    if freeing:
        # Every expression of an UPDATE reads the row as it was: both test the old holder.
        sets += (
            ", active_run_id = CASE WHEN active_run_id = :run THEN NULL ELSE active_run_id END"
            ", status = CASE WHEN active_run_id = :run THEN 'idle' ELSE status END"
        )
    where = "tenant_id = :tenant AND session_id = :session"
    if by_seq:
        where += " AND last_seq = :seq"
    if by_version:
        where += " AND version = :version"
    return f"UPDATE sessions SET {sets} WHERE {where} RETURNING {SESSION_COLUMNS}"


class Jobs:
    """Runs write jobs on the database's writer and inserts their events."""

    def __init__(self, db: SqliteDatabase, payloads: Payloads) -> None:
        self.db = db
        self.payloads = payloads

    async def run(self, work: JobOf[_T], *, held: bool = False) -> _T:
        """`work` in a committed write transaction of the writer; then, as `write` does after
        its commit, this process's listeners are woken and the appended events counted.

        `held`: the caller holds the write lock already (`hold`)."""
        job: Job = functools.partial(self._collected, work=work)
        with span("store.write", **{"db.system": "sqlite"}):
            if held:
                done = await self.db.writer.run_held(job, self._announce)
            else:
                done = await self.db.writer.run(job, self._announce)
        if done.error is not None:
            raise done.error
        return cast(_T, done.value)  # what `work` returned

    def _announce(self, done: Done) -> None:
        """After a job's commit (even one whose caller was cancelled meanwhile)."""
        holder = SimpleNamespace(info=done.info)
        self.db.announcer.after_commit(self.db.announcer.take(cast(AsyncConnection, holder)))
        appended = done.info.get(APPENDED)
        if appended:
            self.db.observer.events_appended(appended)

    @staticmethod
    async def _collected(conn: AsyncConnection, *, work: Job) -> Any:
        conn.info[APPENDED] = []  # note_appended collects the job's event types here
        return await work(conn)

    async def insert_events(
        self,
        conn: AsyncConnection,
        session: SessionRecord,
        events: list[NewEvent],
        *,
        first_seq: int,
    ) -> list[Event]:
        if not events:
            return []
        # Counted for metrics once the transaction commits (see Database.write); a fork's
        # copied prefix (_copy_events) is not new and is not counted.
        note_appended(conn, [str(e.type) for e in events])
        now = utcnow()
        stamp = sqlite_time(now)
        top = await self.reserve_positions(conn, len(events))
        first_position = top - len(events) + 1
        written: list[Event] = []
        rows: list[list[Any]] = []
        ids = new_event_ids(len(events))
        for i, e in enumerate(events):
            # The JSON text the size check measured is the text stored: encoded once.
            clean, text = self.payloads.persistable_json(e.payload)
            event = e.stored(
                ids[i], session.session_id, first_seq + i, clean, now, first_position + i
            )
            written.append(event)
            values = [session.tenant_id, *_EVENT_VALUES(event)]
            values[1 + PAYLOAD] = text
            values[1 + CREATED_AT] = stamp
            rows.append(values)
        driver(conn).executemany(_INSERT_EVENT_ROW, rows)
        # Announced after the commit with the events as written: the bus hands them on.
        self.db.touch(conn, session.tenant_id, session.session_id, session.last_seq, written)
        return written

    async def reserve_positions(self, conn: AsyncConnection, n: int) -> int:
        """Reserve `n` global positions and return the highest."""
        row = driver(conn).execute(_RESERVE_POSITIONS, (_POSITION_COUNTER, n)).fetchone()
        return int(row[0])
