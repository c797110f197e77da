"""SQLite's one writer: a dedicated connection and thread, with group commit.

Through the async pool (aiosqlite), every statement, cursor and fetch of a write is a hop to
the driver's thread and back through the event loop: an append was about a dozen hops, and
on a busy machine each hop waits for the loop, so appends ran at 0.14x of a bare
INSERT+COMMIT loop. Here a write is a *job*: the store's own async code (the same
SQLAlchemy Core statements), run to completion in this thread on one synchronous connection,
whose `execute` never suspends. A job is one hop there and one back, whatever it executes.

Group commit, as on PostgreSQL (`app/store/postgres/group_commit.py`): a job that finds the
writer idle runs at once, alone. Jobs arriving while a transaction runs queue, and the next
transaction takes all of them (up to `max_batch`): one `BEGIN IMMEDIATE`, each job inside
its own SAVEPOINT (a job that raises is rolled back alone, and its caller gets its error,
as if it had been alone), one COMMIT, so one WAL append and, at `synchronous=FULL`, one fsync
for the batch. Each caller returns once its job is committed. Nothing is retried: SQLite
tells a failed COMMIT apart from a lost reply (there is no reply to lose in-process), so a
batch either committed for every job in it or for none.

The writer holds the store's write lock (`SqliteDatabase.write_lock`) for each transaction, so
it and the writes that still go through the pool (leases, automatic snapshots, accounts)
take turns in this process instead of in SQLite's busy handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import weakref
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import create_engine
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.pool import StaticPool

from app.runtime.ports import SessionRecord
from app.store.base import as_utc
from app.store.engine import WRITE_OPTION, install_sqlite_hooks

log = logging.getLogger("app.store.sqlite")

_T = TypeVar("_T")

# A job: the store's write, as a coroutine function of the connection it writes with.
Job = Callable[[AsyncConnection], Coroutine[Any, Any, Any]]
# A job whose value is a `_T` (`Jobs.run` returns it).
JobOf = Callable[[AsyncConnection], Coroutine[Any, Any, _T]]


class JobConnection:
    """What a job's code sees as its connection: `execute` runs the statement at once on
    the writer's synchronous connection (so a job's coroutine never really suspends), and
    `info` is the job's own (the announcer's touched sessions, the appended event types)."""

    __slots__ = ("_conn", "driver", "info")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        # The sqlite3 connection under it, for the statements every append runs (store.py).
        self.driver = cast(sqlite3.Connection, conn.connection.driver_connection)
        self.info: dict[str, Any] = {}

    async def execute(self, statement: Any, parameters: Any = None) -> Any:
        return self._conn.execute(statement, parameters)


def driver(conn: AsyncConnection) -> sqlite3.Connection:
    """The writer's sqlite3 connection under a job's connection."""
    return cast(JobConnection, conn).driver


def sqlite_time(value: datetime) -> str:
    """A UTC datetime as SQLAlchemy's SQLite DATETIME stores it (naive text, read back as
    UTC by `as_utc`), so rows written here and through SQLAlchemy compare and sort alike."""
    return value.replace(tzinfo=None).isoformat(" ", "microseconds")


def session_from_tuple(row: tuple[Any, ...]) -> SessionRecord:
    """A `sessions` row selected with every column in table order, as the store's record."""
    (tenant, session, root, parent, forked, status, meta, agent, binding, last_seq, version,
     active, created, updated, expires, idle_ttl) = row  # fmt: skip
    return SessionRecord(
        tenant_id=tenant,
        session_id=session,
        root_session_id=root,
        parent_session_id=parent,
        forked_from_seq=forked,
        status=status,
        metadata=json.loads(meta) if meta else {},
        agent=json.loads(agent) if agent else {},
        binding=json.loads(binding) if binding else {},
        last_seq=last_seq,
        version=version,
        active_run_id=active,
        created_at=as_utc(datetime.fromisoformat(created)),
        updated_at=as_utc(datetime.fromisoformat(updated)),
        expires_at=as_utc(datetime.fromisoformat(expires)) if expires else None,
        idle_ttl_seconds=idle_ttl,
    )


@dataclass
class Done:
    """A job's outcome, and its connection's `info` (read after the commit)."""

    value: Any = None
    error: BaseException | None = None
    info: dict[str, Any] = field(default_factory=dict)


# What a job's caller wants done once its job committed (wake the listeners): called on the
# loop whether or not the caller is still waiting.
Committed = Callable[[Done], None]


def run_now(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (a job on a `JobConnection`) to its end."""
    try:
        coroutine.send(None)
    except StopIteration as finished:
        return finished.value
    coroutine.close()
    raise RuntimeError("a writer job awaited something other than its connection")


class SqliteWriter:
    """One connection, one thread, group commit. Built lazily by the store; the thread and
    the connection end with the store (`weakref.finalize`) or `close`."""

    def __init__(
        self, url: URL, synchronous: str, lock: asyncio.Lock, *, max_batch: int = 64
    ) -> None:
        self.url = url.set(drivername="sqlite")
        self.synchronous = synchronous
        self.lock = lock
        self.max_batch = max_batch
        _reap()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr-sqlite-writer")
        self._engine: Any = None
        self._conn: Connection | None = None
        self._queue: list[tuple[Job, asyncio.Future[Done], Committed | None]] = []
        self._draining: asyncio.Task[None] | None = None
        self._busy = False  # a lone caller's transaction is running (`run`)

    def attach(self, owner: object) -> None:
        """Close the connection and end the thread once `owner` (the store) is collected
        (at the next safe point: see `_retire`)."""
        weakref.finalize(owner, _retire, self._executor, self._close_sync)

    async def run(self, job: Job, committed: Committed | None = None) -> Done:
        """Run `job` in a committed transaction (alone, or with the jobs queued with it).

        `committed(outcome)` is called as soon as the job committed, even if the caller was
        cancelled while its transaction ran: the thread finishes the transaction regardless,
        and what the commit must announce cannot be lost with the caller.
        """
        if _RETIRED:
            _reap()
        loop = asyncio.get_running_loop()
        if not self._busy and self._draining is None:
            # Nobody writing or waiting: this caller runs its own transaction, at once,
            # with no task in between (a lone writer never waits for a batch).
            self._busy = True
            try:
                async with self.lock:
                    work = loop.run_in_executor(self._executor, self._transact, [job])
                    if committed is not None:
                        work.add_done_callback(lambda f: _report(f, committed))
                    [outcome] = await asyncio.shield(work)
                return outcome
            finally:
                self._busy = False
        future: asyncio.Future[Done] = loop.create_future()
        self._queue.append((job, future, committed))
        if self._draining is None:
            self._draining = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def run_held(self, job: Job, committed: Committed | None = None) -> Done:
        """`run`, for a caller that holds the write lock already (`SqliteLedger.hold`): no
        transaction is running, and none can start until the caller lets go."""
        work = asyncio.get_running_loop().run_in_executor(self._executor, self._transact, [job])
        if committed is not None:
            work.add_done_callback(lambda f: _report(f, committed))
        [outcome] = await asyncio.shield(work)
        return outcome

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_sync)

    async def _drain(self) -> None:
        try:
            while self._queue:
                async with self.lock:
                    batch = self._queue[: self.max_batch]
                    del self._queue[: self.max_batch]
                    jobs = [job for job, _, _ in batch]
                    try:
                        outcomes = await asyncio.get_running_loop().run_in_executor(
                            self._executor, self._transact, jobs
                        )
                    except BaseException as exc:  # BEGIN or COMMIT failed: nothing committed
                        outcomes = [Done(error=exc) for _ in jobs]
                for (_, future, committed), outcome in zip(batch, outcomes, strict=True):
                    if committed is not None and outcome.error is None:
                        _announce(committed, outcome)
                    if not future.done():
                        future.set_result(outcome)
        finally:
            self._draining = None

    # ------------------------------------------------------------ in the thread

    def _connection(self) -> Connection:
        if self._conn is None:
            self._engine = create_engine(self.url, poolclass=StaticPool)
            install_sqlite_hooks(self._engine, self.synchronous)
            conn = self._engine.connect()
            self._conn = conn.execution_options(**{WRITE_OPTION: True})
        return self._conn

    def _transact(self, jobs: list[Job]) -> list[Done]:
        conn = self._connection()
        if len(jobs) == 1:  # alone: no SAVEPOINT, a failure rolls the transaction back
            try:
                with conn.begin():
                    outcome = self._run_job(conn, jobs[0])
                    if outcome.error is not None:
                        raise _Abort(outcome)
            except _Abort as abort:
                return [abort.outcome]
            return [outcome]
        outcomes: list[Done] = []
        with conn.begin():  # BEGIN IMMEDIATE (engine.py); COMMIT on exit
            # SAVEPOINTs on the driver: SQLAlchemy's nested transactions cost a third of a
            # batched append's CPU. The job's code never opens one of its own.
            sqlite = cast(sqlite3.Connection, conn.connection.driver_connection)
            for job in jobs:
                sqlite.execute("SAVEPOINT asr_job")
                outcome = self._run_job(conn, job)
                if outcome.error is not None:
                    sqlite.execute("ROLLBACK TO asr_job")
                sqlite.execute("RELEASE asr_job")
                outcomes.append(outcome)
        return outcomes

    @staticmethod
    def _run_job(conn: Connection, job: Job) -> Done:
        jc = JobConnection(conn)
        try:
            value = run_now(job(cast(AsyncConnection, jc)))
        except Exception as exc:
            return Done(error=exc, info=jc.info)
        return Done(value=value, info=jc.info)

    def _close_sync(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def _report(work: asyncio.Future[list[Done]], committed: Committed) -> None:
    """A lone job's transaction ended: report its commit (not a rollback, not a failure)."""
    if work.cancelled() or work.exception() is not None:
        return
    [outcome] = work.result()
    if outcome.error is None:
        _announce(committed, outcome)


def _announce(committed: Committed, outcome: Done) -> None:
    try:
        committed(outcome)
    except Exception:  # the commit stands: a failed announcement costs latency (polling)
        log.exception("announcing a committed write failed")


class _Abort(Exception):
    """A lone job failed: its transaction rolls back and the caller gets the job's error."""

    def __init__(self, outcome: Done) -> None:
        super().__init__("job failed")
        self.outcome = outcome


# Writers whose store was collected, waiting for their connection to be closed and their
# thread ended. A finalizer runs wherever the garbage collector happened to run: once it ran
# inside another executor's `submit()`, which holds `concurrent.futures`' global lock, and
# its own `submit()` waited for that lock forever (the test suite's main thread hung). So
# the finalizer only appends here (atomic, no lock), and the work is done at the next safe
# point: a writer made or used in this process.
_RETIRED: list[tuple[ThreadPoolExecutor, Callable[[], None]]] = []


def _retire(executor: ThreadPoolExecutor, close: Callable[[], None]) -> None:
    _RETIRED.append((executor, close))


def _reap() -> None:
    while _RETIRED:
        executor, close = _RETIRED.pop()
        with contextlib.suppress(RuntimeError):  # the interpreter is already shutting down
            executor.submit(close)
        executor.shutdown(wait=False)
