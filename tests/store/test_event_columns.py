"""An event column is listed in as few places as possible, and those places agree.

Reads and SQLite's writes take the columns from the runtime's `Event` (`EVENT_FIELDS`) and
the schema (`tables.py`); PostgreSQL's writers list them in three INSERTs: one session's new
events and a fork's copied prefix in `insert_events.sql`, a group commit batch's events in
`insert_event_sets.sql`. These checks need no database: they catch the copy that a new
column would otherwise miss, which used to break only PostgreSQL, only on some calls.
"""

from __future__ import annotations

import re
from dataclasses import fields
from datetime import UTC, datetime

import pytest

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


# The sources that insert events: one session's (and a fork's copy), a batch's.
_INSERTERS = ("insert_events", "insert_event_sets")


def test_every_insert_of_events_writes_every_column() -> None:
    columns = {c.name for c in session_events.columns} - _ASSIGNED
    lists = [found for name in _INSERTERS for found in _insert_column_lists(source(name))]
    assert len(lists) == 3  # a fork's copy, one session's new events, a batch's
    assert all(found == columns for found in lists)


def test_no_other_postgresql_source_inserts_events() -> None:
    others = [name for name in SOURCES if name not in _INSERTERS]
    assert [name for name in others if _INSERT.search(source(name))] == []


@pytest.mark.parametrize(
    ("name", "element"), [("insert_events", "u.v"), ("insert_event_sets", "v.v")]
)
def test_the_inserts_of_new_events_read_every_plain_field_of_new_event(
    name: str, element: str
) -> None:
    body = source(name)
    plain = [f.name for f in fields(NewEvent) if f.name not in ("type", "payload")]
    assert [p for p in plain if f"{element}->>'{p}'" not in body] == []


def test_a_new_event_keeps_every_field_once_stored() -> None:
    new = NewEvent("STEP_END", {"a": 1}, "run_1", "turn_1")
    now = datetime.now(UTC)
    event = new.stored("e1", "s1", 3, {"a": 1}, now, 42)
    assert event == Event("e1", "s1", 3, "STEP_END", {"a": 1}, now, "run_1", "turn_1", 42)
    shared = {f.name for f in fields(NewEvent)} & set(EVENT_FIELDS)
    assert {n: getattr(event, n) for n in shared} == {n: getattr(new, n) for n in shared}
