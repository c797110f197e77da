"""An event column is listed in as few places as possible, and those places agree.

Reads and SQLite's writes take the columns from the runtime's `Event` (`EVENT_FIELDS`) and
the schema (`tables.py`); PostgreSQL's writers list them once, in `insert_events.sql`. These
checks need no database: they catch the copy that a new column would otherwise miss, which
used to break only PostgreSQL, only on some calls.
"""

from __future__ import annotations

import re
from dataclasses import fields
from datetime import UTC, datetime

from app.runtime.session.events import Event, NewEvent
from app.store.base import EVENT_FIELDS
from app.store.postgres.install import SOURCES, source
from app.store.tables import session_events

# Columns no writer sets: the identity (PostgreSQL) or a store-assigned counter (SQLite).
_ASSIGNED = {"position"}
_INSERT = re.compile(r"INSERT INTO session_events\b[^(]*\(([^)]*)\)", re.S)


def _insert_column_lists(sql: str) -> list[set[str]]:
    return [{c.strip() for c in cols.split(",")} for cols in _INSERT.findall(sql)]


def test_every_field_of_event_is_a_column() -> None:
    columns = {c.name for c in session_events.columns}
    assert set(EVENT_FIELDS) <= columns
    assert EVENT_FIELDS == tuple(f.name for f in fields(Event))


def test_insert_events_sql_writes_every_column_in_both_of_its_inserts() -> None:
    columns = {c.name for c in session_events.columns} - _ASSIGNED
    lists = _insert_column_lists(source("insert_events"))
    assert len(lists) == 2  # a fork's copy, then the new events
    assert all(found == columns for found in lists)


def test_no_other_postgresql_source_inserts_events() -> None:
    others = [name for name in SOURCES if name != "insert_events"]
    assert [name for name in others if _INSERT.search(source(name))] == []


def test_insert_events_sql_reads_every_plain_field_of_new_event() -> None:
    body = source("insert_events")
    plain = [f.name for f in fields(NewEvent) if f.name not in ("type", "payload")]
    assert [name for name in plain if f"u.v->>'{name}'" not in body] == []


def test_a_new_event_keeps_every_field_once_stored() -> None:
    new = NewEvent("STEP_END", {"a": 1}, "run_1", "turn_1")
    now = datetime.now(UTC)
    event = new.stored("e1", "s1", 3, {"a": 1}, now, 42)
    assert event == Event("e1", "s1", 3, "STEP_END", {"a": 1}, now, "run_1", "turn_1", 42)
    shared = {f.name for f in fields(NewEvent)} & set(EVENT_FIELDS)
    assert {n: getattr(event, n) for n in shared} == {n: getattr(new, n) for n in shared}
