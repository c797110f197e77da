"""Frozen migrations and the repeatable step (PostgreSQL).

Each migration installs the functions' text it was written with (`migrations/sql/<rev>/`),
never today's sources; after the last migration of an upgrade to head the repeatable step
(`app/store/postgres/install.py`, run by `migrations/env.py`) installs each current source
whose checksum differs from the one `asr_repeatable` records, and skips the others. Each
test migrates a scratch database of its own.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy.ext.asyncio import create_async_engine

from app.store.migrations import ROOT, alembic_config, upgrade_head
from app.store.postgres import install
from app.store.postgres.install import SOURCES, checksum, function_body, function_name, source
from tests.conftest import PG_ENV, create_database, drop_database

pytestmark = pytest.mark.skipif(
    not os.environ.get(PG_ENV), reason="stored functions are PostgreSQL's"
)

FROZEN = ROOT / "migrations" / "sql"
LAST_VERSIONED = "0015"  # the last migration that installs a function's frozen text


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[str]:
    url = create_database(tmp_path, label="repeatable")
    try:
        yield url
    finally:
        drop_database(url)


def _fetch(url: str, sql: str) -> list[Any]:
    async def go() -> list[Any]:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                return list((await conn.exec_driver_sql(sql)).all())
        finally:
            await engine.dispose()

    return asyncio.run(go())


def _bodies(url: str) -> dict[str, list[str]]:
    held: dict[str, list[str]] = {}
    rows = _fetch(
        url,
        "SELECT p.proname, p.prosrc FROM pg_proc p"
        " JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'public' AND p.proname LIKE 'asr\\_%'",
    )
    for name, body in rows:
        held.setdefault(name, []).append(body)
    return held


def _records(url: str) -> dict[str, tuple[str, object]]:
    rows = _fetch(url, "SELECT name, checksum, installed_at FROM asr_repeatable")
    return {name: (digest, at) for name, digest, at in rows}


def _edited_copy(tmp_path: Path, name: str) -> Path:
    """A copy of the sources with `name`'s body changed (a comment: its checksum differs)."""
    copy = tmp_path / "sql"
    shutil.copytree(install.FUNCTIONS_DIR, copy)
    path = copy / f"{name}.sql"
    path.write_text(path.read_text().replace("AS $fn$", "AS $fn$\n    -- edited", 1))
    return copy


def test_an_upgrade_to_head_records_every_source(scratch: str) -> None:
    upgrade_head(scratch)
    records = _records(scratch)
    assert {name: digest for name, (digest, _) in records.items()} == {
        name: checksum(source(name)) for name in SOURCES
    }
    upgrade_head(scratch)  # nothing changed: nothing installed again
    assert _records(scratch) == records


def test_an_edited_source_is_reinstalled_and_the_others_skipped(
    scratch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upgrade_head(scratch)
    before = _records(scratch)
    edited = _edited_copy(tmp_path, "session_tail")
    monkeypatch.setattr(install, "FUNCTIONS_DIR", edited)

    upgrade_head(scratch)
    after = _records(scratch)
    assert after["session_tail"][0] == checksum(source("session_tail", edited))
    assert after["session_tail"] != before["session_tail"]
    assert {n: r for n, r in after.items() if n != "session_tail"} == {
        n: r for n, r in before.items() if n != "session_tail"
    }
    held = _bodies(scratch)[function_name("session_tail")]
    assert held == [function_body("session_tail", edited)]
    assert "-- edited" in held[0]

    upgrade_head(scratch)  # the same checksum again: skipped
    assert _records(scratch) == after

    monkeypatch.undo()  # the source as it is: installed back
    upgrade_head(scratch)
    assert _records(scratch)["session_tail"][0] == before["session_tail"][0]
    assert _bodies(scratch)[function_name("session_tail")] == [function_body("session_tail")]


def test_a_migration_step_that_ran_clears_the_record(scratch: str) -> None:
    upgrade_head(scratch)

    async def step(migrated: bool) -> list[str]:
        engine = create_async_engine(scratch)
        try:
            async with engine.begin() as conn:
                return await conn.run_sync(
                    lambda sync: install.repeatable_step(sync, migrated=migrated, at_head=True)
                )
        finally:
            await engine.dispose()

    assert asyncio.run(step(False)) == []
    assert asyncio.run(step(True)) == list(SOURCES)


def test_the_migrations_install_their_frozen_text_and_read_no_source(
    scratch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no sources at all, the versioned migrations still run, and leave each function
    with the text of the last migration that installed it; down to base and up again too."""
    monkeypatch.setattr(install, "FUNCTIONS_DIR", tmp_path / "no-sources")
    config = alembic_config(scratch)
    command.upgrade(config, LAST_VERSIONED)
    command.downgrade(config, "base")
    assert _bodies(scratch) == {}
    command.upgrade(config, LAST_VERSIONED)

    latest: dict[str, Path] = {}
    for folder in sorted(FROZEN.iterdir()):
        for path in folder.glob("*.sql"):
            latest[path.stem] = folder
    expected = {function_name(n, latest[n]): [function_body(n, latest[n])] for n in latest}
    assert _bodies(scratch) == expected
