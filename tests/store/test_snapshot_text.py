"""A snapshot's stored text (app/store/snapshot_text.py): both backends store the canonical
text that was hashed where orjson reads it back exactly, a load checks the hash on the bytes
it read, and every state still comes back exactly as written, or not at all when torn."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Text, cast, select, type_coerce, update
from sqlalchemy.dialects.postgresql import JSONB

from app.runtime.ports import NewSession
from app.runtime.session.events import EventType, NewEvent
from app.runtime.session.state import state_hash
from app.store.snapshot_text import intact_canonical_state, snapshot_text
from app.store.stores import Stores
from app.store.tables import session_snapshots
from tests.conftest import TenantKey
from tests.store.test_json_text import _VALUES, _same

_STATES = st.dictionaries(st.text(), _VALUES, max_size=6).map(lambda d: {**d, "seq": 1})


def _canonical(state: dict[str, Any]) -> str:
    return json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _big_state(items: int) -> dict[str, Any]:
    """Large enough (hundreds of kilobytes) that the load hashes and decodes at once."""
    text = "The quick brown fox jumps over the lazy dog, ünïcödé ✓. " * 8
    return {"seq": 7, "memory": {"items": [{"n": i, "content": text} for i in range(items)]}}


@given(_STATES)
def test_every_state_reads_back_exactly_from_the_text_stored(state: dict[str, Any]) -> None:
    try:
        text, digest = snapshot_text(state)
    except UnicodeEncodeError:  # a lone surrogate: no database stores it
        return
    assert digest == state_hash(state)
    read = intact_canonical_state(text.encode(), digest)
    assert read is not None and _same(read, state)


def test_the_canonical_text_is_stored_where_orjson_reads_it_exactly() -> None:
    plain = {"seq": 1, "memory": {"items": [{"t": "é✓", "f": 12345.678, "n": 2**63}]}}
    text, digest = snapshot_text(plain)
    assert text == _canonical(plain) and digest == state_hash(plain)
    for odd in (2**64, -(2**63) - 1, 1.5e-7, math.nan):
        state = {"seq": 1, "v": odd}
        text, digest = snapshot_text(state)
        assert text != _canonical(state), odd
        assert digest == state_hash(state)
        read = intact_canonical_state(text.encode(), digest)
        assert read is not None and _same(read, state)


@pytest.mark.parametrize("items", [3, 2_000])
def test_a_torn_or_altered_text_is_refused(items: int) -> None:
    state = _big_state(items)
    text, digest = snapshot_text(state)
    raw = text.encode()
    assert intact_canonical_state(raw, digest) == state
    assert intact_canonical_state(raw[: len(raw) // 2], digest) is None
    altered = raw.replace(b'"n":1}', b'"n":2}', 1)
    assert altered != raw and intact_canonical_state(altered, digest) is None
    assert intact_canonical_state(raw[:-1] + b"\xff", digest) is None


def test_a_text_in_the_earlier_form_still_loads() -> None:
    """Rows written before SQLite stored canonical text hold `json.dumps`'s default text."""
    state = _big_state(2_000)
    assert intact_canonical_state(json.dumps(state).encode(), state_hash(state)) == state


async def test_the_canonical_text_is_stored_and_the_earlier_form_read(
    store: Stores, tenant: TenantKey
) -> None:
    """Both ways a snapshot is written (saved on its own; in an append, PostgreSQL's stored
    function) store the canonical text. A row of the earlier form (SQLite's JSON text,
    PostgreSQL's JSONB text: neither canonical) still loads, checked the long way."""
    t = tenant.tenant_id
    event = NewEvent(EventType.STEP_END, {"i": 1}, "run_1", "t1")
    await store.ledger.create_session(
        t, session=NewSession(session_id="s", metadata={}, agent={}, binding={}), events=[event]
    )
    state = _big_state(2_000) | {"seq": 1}
    assert await store.ledger.save_snapshot(t, "s", seq=1, kind="auto", state=state)
    snaps = session_snapshots.c
    async with store.database.read(t) as conn:
        stored = (
            await conn.execute(select(type_coerce(snaps.state, Text)).where(snaps.tenant_id == t))
        ).scalar_one()
    assert stored == _canonical(state)
    snap = await store.ledger.get_snapshot(t, "s")
    assert snap is not None and snap.state == state
    appended = state | {"seq": 2}
    await store.ledger.append_events(
        t, "s", events=[event], expected_seq=1, snapshot=("auto", appended)
    )
    async with store.database.read(t) as conn:
        stored = (
            await conn.execute(
                select(type_coerce(snaps.state, Text)).where(snaps.tenant_id == t, snaps.seq == 2)
            )
        ).scalar_one()
    assert stored == _canonical(appended)
    assert [s.state for s in await store.ledger.list_snapshots(t, "s")] == [state, appended]

    earlier: Any = type_coerce(json.dumps(appended), Text)
    if store.dialect == "postgresql":  # the text of the JSONB the row was before 0022
        earlier = cast(cast(earlier, JSONB), Text)
    async with store.database.write(t) as conn:
        await conn.execute(
            update(session_snapshots)
            .where(snaps.tenant_id == t, snaps.seq == 2)
            .values(state=earlier)
        )
    snap = await store.ledger.get_snapshot(t, "s")
    assert snap is not None and (snap.seq, snap.state) == (2, appended)
