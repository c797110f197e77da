"""The raw baselines: the same work done with the bare driver (asyncpg, aiosqlite).

Writes go to `raw_events`, a table equivalent to `session_events` (same columns, keys,
unique constraints and indexes; on PostgreSQL `LIKE session_events INCLUDING ALL`). Reads
select the very rows the store reads, from `session_events`, and decode the JSON payloads
with the standard library (a caller gets usable rows, as from the store).

Forks copy into `raw_fork_events`, which also has the ledger's foreign key to `sessions`
(`LIKE` copies no foreign key): a fork's copy is checked row by row against its session's
row, in the store as in any schema that keeps events with their session, so the raw fork
inserts its child's row and pays that check too. The append loops keep the key-less table:
there the check is a small part of a commit, and leaving it out only flatters the baseline.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from bench.common import EVENT_TYPE, asyncpg_dsn, payload, sqlite_path

_COLUMNS = (
    "tenant_id, session_id, seq, event_id, xact_id, type, run_id, turn_id, payload, created_at"
)

# Read in this order, so that the payload is the last but one column.
_READ = "tenant_id, session_id, seq, event_id, position, type, run_id, turn_id, payload, created_at"


def _sqlite_events_ddl(table: str, key: str = "") -> list[str]:
    """`table` as SQLite's `session_events` is (columns, keys, indexes), plus `key`."""
    return [
        f"""CREATE TABLE IF NOT EXISTS {table} (
        tenant_id VARCHAR(64) NOT NULL, session_id VARCHAR(128) NOT NULL,
        seq BIGINT NOT NULL, event_id VARCHAR(36) NOT NULL, position BIGINT NOT NULL,
        xact_id BIGINT, type VARCHAR(64) NOT NULL, run_id VARCHAR(64), turn_id VARCHAR(64),
        payload JSON NOT NULL, created_at DATETIME NOT NULL,
        PRIMARY KEY (tenant_id, session_id, seq), UNIQUE (event_id), UNIQUE (position){key})""",
        f"CREATE INDEX IF NOT EXISTS ix_{table}_tp ON {table} (tenant_id, position)",
        f"CREATE INDEX IF NOT EXISTS ix_{table}_txp ON {table} (tenant_id, xact_id, position)",
    ]


_SESSION_KEY = (
    "FOREIGN KEY (tenant_id, session_id) REFERENCES sessions (tenant_id, session_id)"
    " ON DELETE CASCADE"
)
_SQLITE_DDL = [
    *_sqlite_events_ddl("raw_events"),
    *_sqlite_events_ddl("raw_fork_events", f",\n        {_SESSION_KEY}"),
]

# A child's (or the padding's) row in `sessions`, as the fork key needs: the source's row
# with the child's id and position in the tree.
_SESSION_COLUMNS = (
    "tenant_id, session_id, root_session_id, parent_session_id, forked_from_seq, status,"
    " metadata, agent, binding, last_seq, version, active_run_id, created_at, updated_at"
)


# An event to write instead of the benchmark's STEP_END: (type, payload JSON text).
Body = tuple[str, str] | None


def _row(tenant: str, session: str, seq: int, body: Body = None) -> tuple[Any, ...]:
    kind, text = body or (str(EVENT_TYPE), json.dumps(payload(seq), separators=(",", ":")))
    return (
        tenant,
        session,
        seq,
        str(uuid.uuid4()),
        None,
        kind,
        "run_bench",
        f"turn_{seq}",
        text,
        datetime.now(UTC),
    )


class RawPostgres:
    def __init__(self, url: str) -> None:
        self.dsn = asyncpg_dsn(url)
        self.pool: Any = None

    async def open(self, size: int = 16) -> None:
        import asyncpg

        async def init(conn: Any) -> None:
            # Binary jsonb (a version byte, then the text), so that COPY can take it too.
            await conn.set_type_codec(
                "jsonb",
                encoder=lambda v: b"\x01" + v.encode(),
                decoder=lambda b: json.loads(b[1:]),
                schema="pg_catalog",
                format="binary",
            )

        self.pool = await asyncpg.create_pool(self.dsn, min_size=size, max_size=size, init=init)
        async with self.pool.acquire() as conn:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS raw_events (LIKE session_events INCLUDING ALL)"
            )
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS raw_fork_events"
                f" (LIKE session_events INCLUDING ALL, {_SESSION_KEY})"
            )

    async def close(self) -> None:
        await self.pool.close()

    _INSERT = (
        f"INSERT INTO raw_events ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
    )

    async def insert_loop(
        self, tenant: str, session: str, n: int, conn_index: int = 0, body: Body = None
    ) -> None:
        """n events, one INSERT + COMMIT each."""
        async with self.pool.acquire() as conn:
            for seq in range(1, n + 1):
                async with conn.transaction():
                    await conn.execute(self._INSERT, *_row(tenant, session, seq, body))

    async def insert_batches(self, tenant: str, session: str, size: int, count: int) -> None:
        async with self.pool.acquire() as conn:
            for b in range(count):
                rows = [_row(tenant, session, b * size + i + 1) for i in range(size)]
                async with conn.transaction():
                    await conn.executemany(self._INSERT, rows)

    async def copy_batches(self, tenant: str, session: str, size: int, count: int) -> None:
        cols = [c.strip() for c in _COLUMNS.split(",")]
        async with self.pool.acquire() as conn:
            for b in range(count):
                rows = [_row(tenant, session, b * size + i + 1) for i in range(size)]
                async with conn.transaction():
                    await conn.copy_records_to_table("raw_events", records=rows, columns=cols)

    async def select_full(self, tenant: str, session: str) -> list[Any]:
        async with self.pool.acquire() as conn, conn.transaction():
            return await conn.fetch(
                "SELECT * FROM session_events WHERE tenant_id = $1 AND session_id = $2"
                " ORDER BY seq",
                tenant,
                session,
            )

    async def load_state(self, tenant: str, session: str) -> tuple[Any, Any, list[Any]]:
        """Session row, newest snapshot at or below its last seq, the events after it."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "SELECT * FROM sessions WHERE tenant_id = $1 AND session_id = $2", tenant, session
            )
            snap = await conn.fetchrow(
                "SELECT * FROM session_snapshots WHERE tenant_id = $1 AND session_id = $2"
                " AND seq <= $3 ORDER BY seq DESC LIMIT 1",
                tenant,
                session,
                row["last_seq"],
            )
            after = snap["seq"] if snap is not None else 0
            if snap is not None and isinstance(snap["state"], str):
                # A text column (migration 0022) is not decoded by the jsonb codec: decoded
                # here, as the SQLite baseline does, so the baseline reads a state too.
                snap = {**snap, "state": json.loads(snap["state"])}
            tail = await conn.fetch(
                "SELECT * FROM session_events WHERE tenant_id = $1 AND session_id = $2"
                " AND seq > $3 AND seq <= $4 ORDER BY seq",
                tenant,
                session,
                after,
                row["last_seq"],
            )
            return row, snap, tail

    async def match_size(self) -> None:
        """Pad raw_fork_events to as many rows as session_events holds, so that the raw fork
        inserts into indexes as large as the store's (index inserts cost more in a larger
        table; a ratio against an almost empty one would flatter the baseline). The padding
        is one session's, with a row in `sessions` as the key needs."""
        async with self.pool.acquire() as conn, conn.transaction():
            missing = await conn.fetchval(
                "SELECT (SELECT count(*) FROM session_events)"
                " - (SELECT count(*) FROM raw_fork_events)"
            )
            if missing <= 0:
                return
            pad = f"pad-{uuid.uuid4().hex[:12]}"
            source = await conn.fetchrow("SELECT tenant_id, session_id FROM session_events LIMIT 1")
            await conn.execute(_PG_CHILD_ROW, source["tenant_id"], source["session_id"], pad, 0)
            await conn.execute(
                f"INSERT INTO raw_fork_events ({_COLUMNS})"
                " SELECT $2, $1, row_number() OVER (), gen_random_uuid()::text, xact_id,"
                " type, run_id, turn_id, payload, created_at FROM session_events LIMIT $3",
                pad,
                source["tenant_id"],
                missing,
            )

    async def fork(self, tenant: str, source: str, at_seq: int, child: str) -> None:
        """The child's row, then its copy of the source's events 1..at_seq."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(_PG_CHILD_ROW, tenant, source, child, at_seq)
            await conn.execute(
                f"INSERT INTO raw_fork_events ({_COLUMNS})"
                " SELECT tenant_id, $3, seq, gen_random_uuid()::text, xact_id, type, run_id,"
                " turn_id, payload, created_at FROM session_events"
                " WHERE tenant_id = $1 AND session_id = $2 AND seq <= $4",
                tenant,
                source,
                child,
                at_seq,
            )


_PG_CHILD_ROW = (
    f"INSERT INTO sessions ({_SESSION_COLUMNS})"
    " SELECT tenant_id, $3, root_session_id, session_id, $4, status, metadata, agent, binding,"
    " $4, 1, NULL, now(), now() FROM sessions WHERE tenant_id = $1 AND session_id = $2"
)


class RawSqlite:
    """aiosqlite with the store's pragmas (its `synchronous` level too, so that both pay the
    same for durability); writers take turns on one asyncio lock, as the store's do (SQLite
    has one writer at a time)."""

    def __init__(self, url: str, synchronous: str = "NORMAL") -> None:
        self.path = sqlite_path(url)
        self.synchronous = synchronous
        self.conns: list[Any] = []
        self.lock = asyncio.Lock()
        self.position = 0
        self.fork_base = 10**12  # forks' positions, clear of the loops'

    async def _connect(self) -> Any:
        import aiosqlite

        conn = await aiosqlite.connect(self.path, isolation_level=None)
        for pragma in (
            "PRAGMA journal_mode=WAL",
            f"PRAGMA synchronous={self.synchronous}",
            "PRAGMA busy_timeout=10000",
            "PRAGMA foreign_keys=ON",  # as the store's: the fork copy's key is checked
        ):
            await conn.execute(pragma)
        return conn

    async def open(self, size: int = 16) -> None:
        self.conns = [await self._connect() for _ in range(size)]
        for ddl in _SQLITE_DDL:
            await self.conns[0].execute(ddl)

    async def close(self) -> None:
        for conn in self.conns:
            await conn.close()

    _INSERT = (
        f"INSERT INTO raw_events ({_COLUMNS}, position) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    def _rows(
        self, tenant: str, session: str, seqs: range, body: Body = None
    ) -> list[tuple[Any, ...]]:
        rows = []
        for seq in seqs:
            self.position += 1
            r = _row(tenant, session, seq, body)
            rows.append((*r[:9], r[9].strftime("%Y-%m-%d %H:%M:%S.%f"), self.position))
        return rows

    async def insert_loop(
        self, tenant: str, session: str, n: int, conn_index: int = 0, body: Body = None
    ) -> None:
        conn = self.conns[conn_index]
        for seq in range(1, n + 1):
            async with self.lock:
                await conn.execute("BEGIN IMMEDIATE")
                row = self._rows(tenant, session, range(seq, seq + 1), body)[0]
                await conn.execute(self._INSERT, row)
                await conn.execute("COMMIT")

    async def insert_batches(self, tenant: str, session: str, size: int, count: int) -> None:
        conn = self.conns[0]
        for b in range(count):
            rows = self._rows(tenant, session, range(b * size + 1, b * size + size + 1))
            async with self.lock:
                await conn.execute("BEGIN IMMEDIATE")
                await conn.executemany(self._INSERT, rows)
                await conn.execute("COMMIT")

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        async with self.conns[0].execute(sql, args) as cursor:
            return list(await cursor.fetchall())

    async def select_full(self, tenant: str, session: str) -> list[Any]:
        conn = self.conns[0]
        await conn.execute("BEGIN")
        try:
            rows = await self._fetch(
                f"SELECT {_READ} FROM session_events WHERE tenant_id = ? AND session_id = ?"
                " ORDER BY seq",
                tenant,
                session,
            )
            return [(*r[:-2], json.loads(r[-2]), r[-1]) for r in rows]
        finally:
            await conn.execute("COMMIT")

    async def load_state(self, tenant: str, session: str) -> tuple[Any, Any, list[Any]]:
        conn = self.conns[0]
        await conn.execute("BEGIN")
        try:
            row = (
                await self._fetch(
                    "SELECT last_seq, metadata, agent, binding FROM sessions"
                    " WHERE tenant_id = ? AND session_id = ?",
                    tenant,
                    session,
                )
            )[0]
            last = row[0]
            snaps = await self._fetch(
                "SELECT seq, state FROM session_snapshots WHERE tenant_id = ? AND session_id = ?"
                " AND seq <= ? ORDER BY seq DESC LIMIT 1",
                tenant,
                session,
                last,
            )
            snap = (snaps[0][0], json.loads(snaps[0][1])) if snaps else None
            after = snap[0] if snap else 0
            tail = await self._fetch(
                f"SELECT {_READ} FROM session_events WHERE tenant_id = ? AND session_id = ?"
                " AND seq > ? AND seq <= ? ORDER BY seq",
                tenant,
                session,
                after,
                last,
            )
            return row, snap, [(*r[:-2], json.loads(r[-2]), r[-1]) for r in tail]
        finally:
            await conn.execute("COMMIT")

    async def match_size(self) -> None:
        """Pad raw_fork_events to as many rows as session_events holds (see RawPostgres)."""
        conn = self.conns[0]
        async with self.lock:
            cursor = await conn.execute(
                "SELECT (SELECT count(*) FROM session_events)"
                " - (SELECT count(*) FROM raw_fork_events),"
                " (SELECT coalesce(max(rowid), 0) FROM session_events)"
            )
            missing, top = await cursor.fetchone()
            if missing <= 0:
                return
            cursor = await conn.execute("SELECT tenant_id, session_id FROM session_events LIMIT 1")
            tenant, source = await cursor.fetchone()
            pad = f"pad-{uuid.uuid4().hex[:12]}"
            base = self.fork_base
            self.fork_base += top + 1
            await conn.execute("BEGIN IMMEDIATE")
            await conn.execute(_SQLITE_CHILD_ROW, (pad, 0, 0, tenant, source))
            await conn.execute(
                f"INSERT INTO raw_fork_events ({_COLUMNS}, position)"
                " SELECT ?, ?, rowid, lower(hex(randomblob(16))), xact_id, type, run_id,"
                " turn_id, payload, created_at, ? + rowid FROM session_events LIMIT ?",
                (tenant, pad, base, missing),
            )
            await conn.execute("COMMIT")

    async def fork(self, tenant: str, source: str, at_seq: int, child: str) -> None:
        """The child's row, then its copy of the source's events 1..at_seq."""
        conn = self.conns[0]
        async with self.lock:
            base = self.fork_base
            self.fork_base += at_seq
            await conn.execute("BEGIN IMMEDIATE")
            await conn.execute(_SQLITE_CHILD_ROW, (child, at_seq, at_seq, tenant, source))
            await conn.execute(
                f"INSERT INTO raw_fork_events ({_COLUMNS}, position)"
                " SELECT tenant_id, ?, seq, lower(hex(randomblob(16))), xact_id, type, run_id,"
                " turn_id, payload, created_at, ? + seq FROM session_events"
                " WHERE tenant_id = ? AND session_id = ? AND seq <= ?",
                (child, base, tenant, source, at_seq),
            )
            await conn.execute("COMMIT")


_SQLITE_CHILD_ROW = (
    f"INSERT INTO sessions ({_SESSION_COLUMNS})"
    " SELECT tenant_id, ?, root_session_id, session_id, ?, status, metadata, agent, binding,"
    " ?, 1, NULL, created_at, updated_at FROM sessions WHERE tenant_id = ? AND session_id = ?"
)


def raw_for(url: str, synchronous: str = "NORMAL") -> RawPostgres | RawSqlite:
    return RawPostgres(url) if url.startswith("postgresql") else RawSqlite(url, synchronous)
