"""`SqliteRuns`: the run writes that insert events, as jobs of the single writer.

Their statements are plain SQL on the writer's driver connection, as the append's are
(jobs.py): a run writes three times (its start, each step, its end), and SQLAlchemy's
per-statement work (building the statement, its cache key, bind and result processing) was
most of the writer thread's time per run, where runs in flight queue behind each other.
They store what SQLAlchemy's types store (JSON text, `sqlite_time`'s DATETIME text), so
every other read and write sees the same rows.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any, cast

from sqlalchemy import JSON, select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.errors import RunAlreadyActive, RunFenced, SessionNotFound, StaleSession
from app.runtime.ports import (
    AppendResult,
    IdempotencyToken,
    NewRun,
    RunFinish,
    RunRecord,
    SessionRecord,
)
from app.runtime.session.events import NewEvent
from app.store.base import utcnow
from app.store.idempotency import IdempotencyStore, committed_result
from app.store.json_text import loads
from app.store.payloads import Payloads
from app.store.runs import LIVE, RunStore, run_from_mapping
from app.store.sqlite.database import SqliteDatabase
from app.store.sqlite.jobs import RESERVE_SET, SESSION_COLUMNS, Jobs, reserve_sql
from app.store.sqlite.writer import driver, session_from_tuple, sqlite_time
from app.store.tables import runs, sessions

_RUN_COLUMNS = tuple(c.name for c in runs.c)
_RUN_COLUMN_LIST = ", ".join(_RUN_COLUMNS)
_JSON_COLUMNS = frozenset(c.name for c in runs.c if isinstance(c.type, JSON))
_TIME_COLUMNS = frozenset(c.name for c in runs.c if c.type.python_type is datetime)

_INSERT_RUN = (
    f"INSERT INTO runs ({_RUN_COLUMN_LIST})"
    f" VALUES ({', '.join(':' + c for c in _RUN_COLUMNS)}) RETURNING {_RUN_COLUMN_LIST}"
)
_COUNT_LIVE = f"SELECT count(*) FROM runs WHERE tenant_id = ? AND status IN {tuple(LIVE)!r}"
# The session taken for a run (`:run`), if no run holds it (and, given `expected`, it is
# still the version and incarnation the caller read).
_CLAIM = (
    f"UPDATE sessions SET {RESERVE_SET}, active_run_id = :run, status = 'running'"
    " WHERE tenant_id = :tenant AND session_id = :session AND active_run_id IS NULL"
)
_CLAIM_EXPECTED = f"{_CLAIM} AND version = :version AND created_at = :created"
# The session freed by a fenced run's closing events, if that run still holds it.
_CLOSE_FENCED = (
    f"UPDATE sessions SET {RESERVE_SET}, active_run_id = NULL, status = 'idle'"
    " WHERE tenant_id = :tenant AND session_id = :session AND active_run_id = :run"
    f" RETURNING {SESSION_COLUMNS}"
)


def _stored(column: str, value: Any) -> Any:
    """A run column's value as SQLAlchemy's type for it stores it on SQLite."""
    if value is None:
        return None
    if column in _JSON_COLUMNS:
        return json.dumps(value)
    if column in _TIME_COLUMNS:
        return sqlite_time(value)
    return value


def run_from_tuple(row: tuple[Any, ...]) -> RunRecord:
    """A `runs` row selected with every column in table order, as the store's record."""
    m = dict(zip(_RUN_COLUMNS, row, strict=True))
    for column in _JSON_COLUMNS:
        m[column] = loads(m[column]) if m[column] is not None else None
    for column in _TIME_COLUMNS:
        m[column] = datetime.fromisoformat(m[column]) if m[column] is not None else None
    return run_from_mapping(m)


@functools.cache
def _update_run_sql(columns: tuple[str, ...], *, fenced: bool, returning: bool) -> str:
    """An UPDATE of one run row setting `columns` (parameters named `v_` + the column),
    where `fenced` only while the caller's epoch holds it and it runs."""
    unknown = set(columns) - set(_RUN_COLUMNS)
    if unknown:  # the names go into the SQL text: only the table's own
        raise ValueError(f"not columns of runs: {sorted(unknown)}")
    sets = ", ".join(f"{c} = :v_{c}" for c in columns)
    where = "tenant_id = :tenant AND run_id = :run"
    if fenced:
        where += " AND epoch = :epoch AND status = 'running'"
    return f"UPDATE runs SET {sets} WHERE {where}" + (
        f" RETURNING {_RUN_COLUMN_LIST}" if returning else ""
    )


def _update_run(
    conn: AsyncConnection,
    tenant_id: str,
    run_id: str,
    values: dict[str, Any],
    *,
    epoch: int | None = None,
    returning: bool = False,
) -> Any:
    """Set `values` on the run (fenced by `epoch` when given); the sqlite3 cursor."""
    sql = _update_run_sql(tuple(values), fenced=epoch is not None, returning=returning)
    params = {f"v_{c}": _stored(c, v) for c, v in values.items()}
    params.update(tenant=tenant_id, run=run_id, epoch=epoch)
    return driver(conn).execute(sql, params)


class SqliteRuns(RunStore):
    """The run writes that insert events, each one job of the single writer."""

    def __init__(
        self, db: SqliteDatabase, payloads: Payloads, idempotency: IdempotencyStore, *, jobs: Jobs
    ) -> None:
        super().__init__(db, payloads, idempotency)
        self.jobs = jobs

    # ------------------------------------------------------------------- runs

    async def start_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        run: NewRun,
        start_events: list[NewEvent],
        max_live_runs: int | None = None,
        expected: tuple[int, datetime] | None = None,
        idempotency: IdempotencyToken | None = None,
        held: bool = False,
    ) -> tuple[RunRecord, AppendResult]:
        """The run's row and its first events, with the session claimed for it: one job.

        `held`: made by `hold`'s session, whose caller holds the write lock."""
        now = utcnow()
        values = self.run_row(tenant_id, session_id, run, idempotency=idempotency, now=now)

        async def work(conn: AsyncConnection) -> Any:
            if max_live_runs is not None:
                live = driver(conn).execute(_COUNT_LIVE, (tenant_id,)).fetchone()[0]
                self.refuse_over(live, max_live_runs)
            session = await self._claim_session(
                conn, tenant_id, session_id, run.run_id, len(start_events), now, expected
            )
            first = session.last_seq - len(start_events) + 1
            started = {"status": "running", "started_at": now, "first_seq": first,
                       "last_seq": session.last_seq}  # fmt: skip
            row = {c: None for c in _RUN_COLUMNS} | values | started
            stored = (
                driver(conn)
                .execute(_INSERT_RUN, {c: _stored(c, v) for c, v in row.items()})
                .fetchone()
            )
            written = await self.jobs.insert_events(conn, session, start_events, first_seq=first)
            record, result = run_from_tuple(stored), AppendResult(session=session, events=written)
            await self.idempotency.seal(
                conn, tenant_id, idempotency, committed_result(result, record.run_id)
            )
            return record, result

        return cast(tuple[RunRecord, AppendResult], await self.jobs.run(work, held=held))

    async def claim_run(
        self,
        tenant_id: str,
        run_id: str,
        *,
        owner: str,
        lease_until: datetime,
        events: list[NewEvent],
        oldest_only: bool = False,
    ) -> tuple[RunRecord, AppendResult]:

        async def work(conn: AsyncConnection) -> Any:
            run = await self._get_run(conn, tenant_id, run_id)
            if run is None or run.status != "queued":
                raise RunFenced(f"run {run_id} is not queued")
            if oldest_only and await self._older_queued(conn, run):
                raise RunAlreadyActive(None)
            now = utcnow()
            session = await self._claim_session(
                conn, run.tenant_id, run.session_id, run.run_id, len(events), now
            )
            first = session.last_seq - len(events) + 1
            written = await self.jobs.insert_events(conn, session, events, first_seq=first)
            claimed = {"status": "running", "lease_owner": owner, "lease_expires_at": lease_until,
                       "started_at": now, "updated_at": now, "first_seq": first,
                       "last_seq": session.last_seq}  # fmt: skip
            row = _update_run(conn, run.tenant_id, run.run_id, claimed, returning=True).fetchone()
            return run_from_tuple(row), AppendResult(session=session, events=written)

        return await self.jobs.run(work)

    async def _claim_session(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        session_id: str,
        run_id: str,
        n: int,
        now: datetime,
        expected: tuple[int, datetime] | None = None,
    ) -> SessionRecord:
        """Make `run_id` the session's active run and reserve `n` seqs, or raise.

        Raises:
            SessionNotFound, RunAlreadyActive, StaleSession (`expected` (version,
            created_at) given and the session is no longer that).
        """
        params = {"run": run_id, "n": n, "now": sqlite_time(now), "tenant": tenant_id,
                  "session": session_id}  # fmt: skip
        sql = _CLAIM
        if expected is not None:
            sql = _CLAIM_EXPECTED
            params.update(version=expected[0], created=sqlite_time(expected[1]))
        row = driver(conn).execute(f"{sql} RETURNING {SESSION_COLUMNS}", params).fetchone()
        if row is not None:
            return session_from_tuple(row)
        active = (
            await conn.execute(
                select(sessions.c.active_run_id).where(
                    sessions.c.tenant_id == tenant_id, sessions.c.session_id == session_id
                )
            )
        ).first()
        if active is None:
            raise SessionNotFound(session_id)
        if active.active_run_id is None and expected is not None:
            raise StaleSession(session_id)
        raise RunAlreadyActive(active.active_run_id)

    async def _older_queued(self, conn: AsyncConnection, run: RunRecord) -> bool:
        older = (
            await conn.execute(
                select(runs.c.run_id)
                .where(
                    runs.c.tenant_id == run.tenant_id,
                    runs.c.session_id == run.session_id,
                    runs.c.status == "queued",
                    runs.c.created_at < run.created_at,
                )
                .limit(1)
            )
        ).first()
        return older is not None

    async def append_run_events(
        self,
        tenant_id: str,
        run_id: str,
        *,
        session_id: str,
        epoch: int,
        events: list[NewEvent],
        lease_until: datetime,
        progress: dict[str, Any] | None = None,
        finish: RunFinish | None = None,
    ) -> AppendResult:
        """Three statements: reserve the seqs (and, when finishing, free the session if this
        run holds it), the fenced update of the run row, the events. A fenced run finds no
        run row and rolls the whole transaction back, reservation included."""
        now = utcnow()
        n = len(events)

        async def work(conn: AsyncConnection) -> Any:
            params = {"n": n, "now": sqlite_time(now), "tenant": tenant_id,
                      "session": session_id, "run": run_id}  # fmt: skip
            row = driver(conn).execute(reserve_sql(freeing=finish is not None), params).fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            record = session_from_tuple(row)
            values: dict[str, Any] = {
                "lease_expires_at": lease_until,
                "updated_at": now,
                "last_seq": record.last_seq,
                **(progress or {}),
            }
            if finish is not None:
                values.update(
                    status=finish.status,
                    stop_reason=finish.stop_reason,
                    output=self.payloads.redact(finish.output),
                    error=self.payloads.redact(finish.error),
                    finished_at=now,
                    lease_expires_at=None,
                )
            cursor = _update_run(
                conn, tenant_id, run_id, values, epoch=epoch, returning=finish is not None
            )
            # A run's end returns its row; a step's update is only counted (no row to decode).
            ended = cursor.fetchone() if finish is not None else None
            taken_over = ended is None if finish is not None else cursor.rowcount == 0
            if taken_over:
                raise RunFenced(f"run {run_id} was taken over")
            written = await self.jobs.insert_events(
                conn, record, events, first_seq=record.last_seq - n + 1
            )
            run = run_from_tuple(ended) if ended is not None else None
            return AppendResult(session=record, events=written, run=run)

        return await self.jobs.run(work)

    async def close_fenced_run(
        self, tenant_id: str, run_id: str, *, events: list[NewEvent]
    ) -> AppendResult | None:

        async def work(conn: AsyncConnection) -> Any:
            run = await self._get_run(conn, tenant_id, run_id)
            if run is None or run.status in LIVE:
                return None
            params = {"n": len(events), "now": sqlite_time(utcnow()), "tenant": tenant_id,
                      "session": run.session_id, "run": run_id}  # fmt: skip
            row = driver(conn).execute(_CLOSE_FENCED, params).fetchone()
            if row is None:
                return None  # no longer held by this run: closed already
            record = session_from_tuple(row)
            written = await self.jobs.insert_events(
                conn, record, events, first_seq=record.last_seq - len(events) + 1
            )
            _update_run(conn, tenant_id, run_id, {"last_seq": record.last_seq})
            return AppendResult(session=record, events=written)

        return await self.jobs.run(work)
