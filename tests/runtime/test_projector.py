"""The projector is pure: plain event lists in, state out."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.runtime.session.events import Event, EventType
from app.runtime.session.projector import evict_to_window, fold
from app.runtime.session.state import SessionState

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def ev(seq: int, type_: str, payload: dict[str, Any] | None = None) -> Event:
    return Event(f"e{seq}", "s", seq, type_, payload or {}, NOW)


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": text}


def test_fold_appends_items_in_order_and_ignores_unknown_types() -> None:
    events = [
        ev(1, EventType.SESSION_CREATED),
        ev(2, EventType.MEMORY_ITEMS_APPENDED, {"items": [user("a"), assistant("b")]}),
        ev(3, "SOME_FUTURE_TYPE", {"items": [user("ignored")]}),
        ev(4, EventType.USER_INPUT, {"item": user("c")}),
    ]
    state = fold(None, events)
    assert state.seq == 4
    assert [i["content"] for i in state.items] == ["a", "b", "c"]


def test_fold_does_not_mutate_its_input() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "c1", "output": "old"}
    first = ev(1, EventType.MEMORY_ITEMS_APPENDED, {"items": [user("q"), call, out]})
    base = fold(None, [first])
    after = fold(base, [ev(2, EventType.TOOL_OUTPUT_REPLACED, {"call_id": "c1", "output": "new"})])
    assert after.items[2]["output"] == "new"
    assert base.items[2]["output"] == "old"
    assert first.payload["items"][2]["output"] == "old"


def test_restore_installs_a_baseline_and_projection_reports_leave_memory_alone() -> None:
    state = fold(
        None,
        [
            ev(1, EventType.MEMORY_ITEMS_APPENDED, {"items": [user("a")]}),
            ev(
                2,
                EventType.SESSION_RESTORED,
                {"state": {"memory": {"items": [user("z")], "summary": "s"}}},
            ),
            ev(3, EventType.MEMORY_COMPRESS, {"kind": "projection", "dropped": 1}),
        ],
    )
    assert state.items == [user("z")]
    assert state.summary == "s"


def test_events_at_or_below_the_state_seq_are_skipped() -> None:
    state = fold(None, [ev(1, EventType.MEMORY_ITEMS_APPENDED, {"items": [user("a")]})])
    again = fold(state, [ev(1, EventType.MEMORY_ITEMS_APPENDED, {"items": [user("a")]})])
    assert again.items == [user("a")]


def test_window_evicts_whole_interactions_fifo() -> None:
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "c", "output": "o"}
    items = [user("1"), call, out, assistant("a1"), user("2"), assistant("a2")]
    assert evict_to_window(items, 3) == [user("2"), assistant("a2")]
    assert evict_to_window(items, 6) == items
    # A window smaller than the newest interaction keeps that interaction whole.
    assert evict_to_window(items, 1) == [user("2"), assistant("a2")]


texts = st.text(max_size=8)
item_strategy = st.one_of(
    texts.map(user),
    texts.map(assistant),
    texts.map(lambda t: {"type": "message", "role": "system", "content": t}),
)
op_strategy = st.one_of(
    st.tuples(st.just("append"), st.lists(item_strategy, min_size=1, max_size=4)),
    st.tuples(st.just("window"), st.one_of(st.none(), st.integers(1, 6))),
    st.tuples(st.just("restore"), st.lists(item_strategy, max_size=4)),
)


def _events(ops: list[tuple[str, Any]]) -> list[Event]:
    out = []
    for seq, (kind, arg) in enumerate(ops, start=1):
        if kind == "append":
            out.append(ev(seq, EventType.MEMORY_ITEMS_APPENDED, {"items": arg}))
        elif kind == "window":
            out.append(ev(seq, EventType.WINDOW_CHANGED, {"max_items": arg}))
        else:
            out.append(
                ev(
                    seq,
                    EventType.SESSION_RESTORED,
                    {"state": {"memory": {"items": arg, "summary": None}}},
                )
            )
    return out


@given(st.lists(op_strategy, max_size=25), st.data())
def test_fold_is_associative_over_any_split_and_snapshot_round_trip(
    ops: list[tuple[str, Any]], data: st.DataObject
) -> None:
    events = _events(ops)
    whole = fold(None, events)
    cut = data.draw(st.integers(0, len(events)))
    snapshot = SessionState.from_json(fold(None, events[:cut]).to_json())
    assert fold(snapshot, events[cut:]) == whole
    assert whole.seq == len(events)


@given(st.lists(item_strategy, max_size=30), st.integers(1, 10))
def test_eviction_never_orphans_and_respects_the_window(
    items: list[dict[str, Any]], n: int
) -> None:
    kept = evict_to_window(items, n)
    assert kept == items[len(items) - len(kept) :]  # a suffix: FIFO
    users = [i for i, x in enumerate(items) if x["role"] == "user"]
    if not users:
        assert len(kept) == min(n, len(items))  # no interactions: plain FIFO
    elif len(kept) < len(items):
        assert kept[0]["role"] == "user"  # the cut starts an interaction
        assert len(kept) <= n or len(items) - len(kept) == users[-1]
