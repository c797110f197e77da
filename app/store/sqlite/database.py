"""`SqliteDatabase`: SQLite's transactions, with one writer at a time.

SQLite has one writer at a time: every write transaction begins IMMEDIATE (a deferred one
that upgrades would fail at once with "database is locked"), and writers of this process
queue on an asyncio lock in arrival order instead of spinning in SQLite's busy handler.
The writes that insert events run as jobs on one writer connection, in its own thread, with
group commit (`writer.py`, through `jobs.py`): one hop per write instead of one per
statement.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.runtime.observer import Observer
from app.store.base import Database
from app.store.engine import sqlite_synchronous
from app.store.sqlite.writer import SqliteWriter


class SqliteDatabase(Database):
    """One writer at a time: a write lock in arrival order, and the writer connection."""

    dialect: ClassVar[str] = "sqlite"
    _write_lock: asyncio.Lock  # always one here (__init__)

    def __init__(self, engine: AsyncEngine, *, observer: Observer | None = None) -> None:
        super().__init__(engine, observer=observer)
        self._write_lock = asyncio.Lock()
        # Every write that inserts events runs on the one writer connection, with group
        # commit (writer.py); the others take turns with it on `write_lock`.
        self.writer = SqliteWriter(engine.url, sqlite_synchronous(engine), self._write_lock)
        self.writer.attach(self)

    @property
    def write_lock(self) -> asyncio.Lock:
        """The lock every write of this process takes (the writer's jobs and the pool's)."""
        return self._write_lock

    def insert(self, table: Any) -> Any:
        return sqlite.insert(table)

    async def _scope(self, conn: AsyncConnection, tenant_id: str) -> None:
        """Nothing: SQLite, the single-tenant embedded default, has no row-level security;
        the application's own tenant filters are the wall."""
