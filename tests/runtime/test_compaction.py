"""Compaction strategies, the breaker and context projection: pure functions, plain data."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.runtime.memory.calibration import scaled
from app.runtime.memory.compaction import (
    CompactionFailed,
    CompactionPolicy,
    ScriptedSummarizer,
    compact,
    failure_payload,
    plan_auto_compaction,
    shrink_tool_results,
    truncate,
)
from app.runtime.memory.context import project, projection
from app.runtime.memory.items import estimate_tokens
from app.runtime.session.projector import cut_points, cuts_newest_first, evict_to_window
from app.runtime.session.state import SessionState


def user(t: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": t}


def assistant(t: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": t}


def call(cid: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": cid, "name": "echo", "arguments": "{}"}


def output(cid: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": cid, "output": text}


CONVERSATION = [
    user("a"),
    call("c1"),
    output("c1", "x" * 5000),
    assistant("done a"),
    user("b"),
    assistant("b!"),
]


def test_truncate_keeps_whole_interactions() -> None:
    done = truncate(SessionState(items=list(CONVERSATION)), keep_last=3)
    assert done.items == [user("b"), assistant("b!")]
    assert (
        done.result["items_removed"] == 4
        and done.result["tokens_after"] < done.result["tokens_before"]
    )


def test_tool_results_shrinks_old_large_outputs_only() -> None:
    done = shrink_tool_results(SessionState(items=list(CONVERSATION)), keep_last=2, max_chars=100)
    stub = done.items[2]["output"]
    assert stub.startswith("[output of echo (call c1) removed: 5000 chars]")
    assert done.items[:2] == CONVERSATION[:2] and done.items[3:] == CONVERSATION[3:]


async def test_summarize_replaces_dropped_items_with_a_summary() -> None:
    state = SessionState(items=list(CONVERSATION), summary="before")
    done = await compact(state, CompactionPolicy(keep_last=2), ScriptedSummarizer())
    assert done.items == [user("b"), assistant("b!")]
    assert done.summary is not None and done.summary.startswith("before | 4 earlier items")


async def test_a_failing_summary_moves_the_breaker() -> None:
    state = SessionState(items=[user("[fail-summary]"), assistant("x"), user("y"), assistant("z")])
    policy = CompactionPolicy(keep_last=2, threshold_tokens=64, breaker_threshold=2)
    with pytest.raises(CompactionFailed):
        await compact(state, policy, ScriptedSummarizer())
    first = failure_payload(state, policy, "boom")["breaker"]
    assert first == {"consecutive_failures": 1, "open": False}
    state.breaker = first
    assert failure_payload(state, policy, "boom")["breaker"] == {
        "consecutive_failures": 2,
        "open": True,
    }
    state.breaker = {"consecutive_failures": 2, "open": True}
    big = SessionState(items=[user("w " * 400)] * 4, breaker=state.breaker)
    assert await plan_auto_compaction(big, policy, ScriptedSummarizer()) == []  # open: no tries


def test_projection_keeps_the_newest_whole_interactions_within_budget() -> None:
    items = [user("q1 " * 100), assistant("a1 " * 100), user("q2"), assistant("a2")]
    kept, report = project(items, "sum", budget=50)
    assert kept == [user("q2"), assistant("a2")]
    assert report["items_dropped"] == 2 and report["fits"] and report["summary_kept"]
    kept, report = project(items, None, budget=None)
    assert kept == items and report["items_dropped"] == 0


kinds = st.sampled_from(["user", "assistant", "pair"])


def projected_by_definition(
    items: list[dict[str, Any]], summary: str | None, budget: int | None, ratio: float
) -> tuple[list[dict[str, Any]], int, int]:
    """What `projection` keeps and its estimates before and after, by its definition: the
    longest suffix starting at a cut whose own estimate fits, else the newest interaction."""

    def estimate(part: list[dict[str, Any]]) -> int:
        return scaled(estimate_tokens(part, summary), ratio)

    kept = items
    if budget is not None and estimate(items) > budget:
        cuts = cut_points(items)
        fitting = [c for c in cuts if estimate(items[c:]) <= budget]
        if fitting:
            kept = items[fitting[0] :]
        elif cuts:
            kept = items[cuts[-1] :]
    return kept, estimate(items), estimate(kept)


@given(st.lists(st.sampled_from(["user", "assistant", "call", "output"]), max_size=30))
def test_cuts_newest_first_are_the_cut_points_reversed(plan: list[str]) -> None:
    made = {
        "user": user("u"),
        "assistant": assistant("a"),
        "call": call("c"),
        "output": output("c", "o"),
    }
    items = [made[kind] for kind in plan]
    assert list(cuts_newest_first(items)) == cut_points(items)[::-1]


@given(
    st.lists(st.tuples(kinds, st.integers(0, 300)), max_size=40),
    st.none() | st.text(max_size=200),
    st.none() | st.integers(1, 3000),
    st.sampled_from([1.0, 0.75, 1.3]),
)
def test_projection_keeps_what_its_definition_keeps(
    plan: list[tuple[str, int]], summary: str | None, budget: int | None, ratio: float
) -> None:
    items: list[dict[str, Any]] = []
    for i, (kind, size) in enumerate(plan):
        if kind == "pair":
            items += [call(f"c{i}"), output(f"c{i}", "o" * size)]
        else:
            items.append((user if kind == "user" else assistant)("w" * size))
    # The given budget, and those on each side of every suffix's own estimate.
    edges = {scaled(estimate_tokens(items[c:], summary), ratio) + d for c in cut_points(items)
             for d in (-1, 0, 1)}  # fmt: skip
    for limit in {budget, *edges}:
        kept, report = projection(items, summary, limit, ratio)
        expected, before, after = projected_by_definition(items, summary, limit, ratio)
        assert kept == expected
        assert (report.tokens_before, report.tokens_after) == (before, after)
        assert report.items_dropped == len(items) - len(kept)


@given(st.lists(kinds, max_size=40), st.integers(1, 12))
def test_window_eviction_never_orphans(plan: list[str], window: int) -> None:
    items: list[dict[str, Any]] = []
    for i, kind in enumerate(plan):
        if kind == "user":
            items.append(user(str(i)))
        elif kind == "assistant":
            items.append(assistant(str(i)))
        else:
            items += [call(f"c{i}"), output(f"c{i}", "o")]
    kept = evict_to_window(items, window)
    calls = {i["call_id"] for i in kept if i["type"] == "function_call"}
    assert all(i["call_id"] in calls for i in kept if i["type"] == "function_call_output")
    if len(kept) < len(items) and any(i.get("role") == "user" for i in items):
        # An assistant reply never outlives the user input that caused it.
        assert kept[0].get("role") == "user"


def test_projection_over_budget_reads_each_item_at_most_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Work linear in memory, not quadratic: one estimate of the whole, then the kept
    suffix, read newest first (counted, not timed)."""
    import app.runtime.memory.context as context
    import app.runtime.memory.items as memory_items

    reads = 0
    plain = memory_items.item_text

    def counted(item: dict[str, Any]) -> str:
        nonlocal reads
        reads += 1
        return plain(item)

    monkeypatch.setattr(memory_items, "item_text", counted)
    monkeypatch.setattr(context, "item_text", counted)
    items = [user("q " * 50) if i % 2 == 0 else assistant("a " * 50) for i in range(4000)]
    kept, report = projection(items, None, budget=2_000, ratio=1.0)
    assert 0 < len(kept) < 200 and report.fits
    assert reads <= 2 * len(items)
