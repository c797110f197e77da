"""Where a string is stored: every column of every table, and every file under a folder.

The erasure tests write a unique marker through every path that stores content, erase,
and ask this where the marker still is. PostgreSQL is read as the superuser (row-level
security would hide rows from the app role), every table of the schema, each row cast to
text (a bytea column shows as hex, which is looked for too); SQLite, every table.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from tests.conftest import PG_ENV


async def tables_holding(database_url: str, marker: str) -> dict[str, int]:
    """{table: rows holding `marker`} over every table of the database."""
    if database_url.startswith("postgresql"):
        return await _postgres(database_url, marker)
    return _sqlite(database_url, marker)


def files_holding(root: Path, marker: str) -> list[str]:
    """The files under `root` whose name or content holds `marker`."""
    raw = marker.encode()
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*")
        if marker in path.name or (path.is_file() and raw in path.read_bytes())
    )


def _sqlite(database_url: str, marker: str) -> dict[str, int]:
    raw = marker.encode()
    found: dict[str, int] = {}
    with sqlite3.connect(make_url(database_url).database or "") as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for name in names:
            for row in conn.execute(f'SELECT * FROM "{name}"'):
                if any(_holds(value, marker, raw) for value in row):
                    found[name] = found.get(name, 0) + 1
    return found


def _holds(value: object, marker: str, raw: bytes) -> bool:
    if isinstance(value, bytes):
        return raw in value
    return isinstance(value, str) and marker in value


async def _postgres(database_url: str, marker: str) -> dict[str, int]:
    superuser = make_url(os.environ[PG_ENV]).set(
        drivername="postgresql", database=make_url(database_url).database
    )
    conn = await asyncpg.connect(superuser.render_as_string(hide_password=False))
    hexed = marker.encode().hex()
    found: dict[str, int] = {}
    try:
        names = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        for (name,) in names:
            n = await conn.fetchval(
                f'SELECT count(*) FROM "{name}" AS t'
                " WHERE strpos(t::text, $1) > 0 OR strpos(t::text, $2) > 0",
                marker,
                hexed,
            )
            if n:
                found[name] = n
    finally:
        await conn.close()
    return found
