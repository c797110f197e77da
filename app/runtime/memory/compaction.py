"""Compaction: rewrite memory to fit, without losing history (the ledger keeps everything).

Strategies are pure functions over items; `summarize` asks a `Summarizer` for the text that
replaces the dropped items. A compaction is one MEMORY_COMPRESS event of kind `compact`
carrying the result and the new memory, so the fold reproduces it exactly. Automatic
compaction (after a turn, past the policy's threshold) has a circuit breaker: each failure
is a MEMORY_COMPRESS of kind `compact_failed` carrying the breaker's new state; after
`breaker_threshold` consecutive failures the breaker opens and automatic compaction stops
until a success or an explicit reset (kind `breaker_reset`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from app.runtime.errors import AgentSessionError
from app.runtime.memory.items import estimate_tokens, item_text
from app.runtime.session.event_payloads import CompactionFailure, CompactResult, MemoryCompacted
from app.runtime.session.projector import evict_to_window
from app.runtime.session.state import SessionState

if TYPE_CHECKING:
    from app.runtime.models.base import ModelClient

Strategy = Literal["truncate", "summarize", "tool_results"]
SUMMARY_MAX_CHARS = 800


class CompactionPolicy(BaseModel):
    """Part of the agent spec (`agent.compaction`)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    strategy: Strategy = "summarize"
    threshold_tokens: int | None = Field(
        default=None, ge=64, description="Compact after a turn once memory passes this."
    )
    keep_last: int = Field(default=8, ge=1, le=10_000, description="Items kept verbatim.")
    tool_output_max_chars: int = Field(default=2000, ge=16)
    breaker_threshold: int = Field(default=3, ge=1, le=100)


class CompactionFailed(AgentSessionError):
    code = "compaction_failed"


class Summarizer(Protocol):
    async def summarize(self, previous: str | None, items: list[dict[str, Any]]) -> str: ...


@dataclass(frozen=True, slots=True)
class Compacted:
    items: list[dict[str, Any]]
    summary: str | None
    result: CompactResult


def _boundary_cut(items: list[dict[str, Any]], keep_last: int) -> int:
    """Index where the kept suffix starts: never inside an interaction or a call pair."""
    kept = evict_to_window(items, keep_last)
    return len(items) - len(kept)


def _result(
    strategy: str,
    trigger: str,
    before: SessionState,
    items: list[dict[str, Any]],
    summary: str | None,
    removed: int,
) -> CompactResult:
    return {
        "strategy": strategy,
        "trigger": trigger,
        "tokens_before": before.estimated_tokens(),
        "tokens_after": estimate_tokens(items, summary),
        "items_before": len(before.items),
        "items_after": len(items),
        "items_removed": removed,
        "summary": summary,
    }


def truncate(state: SessionState, keep_last: int, trigger: str = "manual") -> Compacted:
    cut = _boundary_cut(state.items, keep_last)
    items = state.items[cut:]
    return Compacted(
        items, state.summary, _result("truncate", trigger, state, items, state.summary, cut)
    )


def shrink_tool_results(
    state: SessionState, keep_last: int, max_chars: int, trigger: str = "manual"
) -> Compacted:
    names = {
        i["call_id"]: i.get("name", "tool") for i in state.items if i.get("type") == "function_call"
    }
    protected = max(0, len(state.items) - keep_last)
    items: list[dict[str, Any]] = []
    shrunk = 0
    for index, item in enumerate(state.items):
        output = item.get("output", "")
        if (
            item.get("type") == "function_call_output"
            and index < protected
            and len(output) > max_chars
        ):
            name = names.get(item["call_id"], "tool")
            stub = f"[output of {name} (call {item['call_id']}) removed: {len(output)} chars]"
            items.append({**item, "output": stub})
            shrunk += 1
        else:
            items.append(item)
    return Compacted(
        items, state.summary, _result("tool_results", trigger, state, items, state.summary, shrunk)
    )


async def summarize(
    state: SessionState, keep_last: int, summarizer: Summarizer, trigger: str = "manual"
) -> Compacted:
    cut = _boundary_cut(state.items, keep_last)
    if cut == 0:
        return Compacted(
            state.items,
            state.summary,
            _result("summarize", trigger, state, state.items, state.summary, 0),
        )
    summary = await summarizer.summarize(state.summary, state.items[:cut])
    items = state.items[cut:]
    return Compacted(items, summary, _result("summarize", trigger, state, items, summary, cut))


async def compact(
    state: SessionState,
    policy: CompactionPolicy,
    summarizer: Summarizer,
    *,
    strategy: str | None = None,
    trigger: str = "manual",
) -> Compacted:
    """Run one strategy (default: the policy's). Raises CompactionFailed."""
    chosen = strategy or policy.strategy
    if chosen == "truncate":
        return truncate(state, policy.keep_last, trigger)
    if chosen == "tool_results":
        return shrink_tool_results(state, policy.keep_last, policy.tool_output_max_chars, trigger)
    try:
        return await summarize(state, policy.keep_last, summarizer, trigger)
    except AgentSessionError as exc:
        raise CompactionFailed(f"the summary failed: {exc.detail or exc.code}") from exc


async def plan_auto_compaction(
    state: SessionState, policy: CompactionPolicy, summarizer: Summarizer
) -> list[MemoryCompacted | CompactionFailure]:
    """The MEMORY_COMPRESS automatic compaction calls for now (none below threshold or while
    the breaker is open); the caller makes it an event with its own run and turn."""
    if policy.threshold_tokens is None or state.breaker.get("open"):
        return []
    if state.estimated_tokens() <= policy.threshold_tokens:
        return []
    try:
        done = await compact(state, policy, summarizer, trigger="auto")
    except CompactionFailed as exc:
        return [compaction_failure(state, policy, exc.detail)]
    if done.result["items_removed"] == 0:
        return []  # nothing left to compact: projection keeps requests within budget
    return [compacted_memory(done)]


def compacted_memory(done: Compacted) -> MemoryCompacted:
    """The record of a compaction: the new memory whole, so the fold installs it as is."""
    return MemoryCompacted(
        result=done.result, memory={"items": done.items, "summary": done.summary}
    )


def compaction_failure(
    state: SessionState, policy: CompactionPolicy, error: str
) -> CompactionFailure:
    """The record of a failed compaction, carrying the breaker's next state."""
    failures = int(state.breaker.get("consecutive_failures", 0)) + 1
    return CompactionFailure(
        error=error,
        breaker={"consecutive_failures": failures, "open": failures >= policy.breaker_threshold},
    )


def failure_payload(state: SessionState, policy: CompactionPolicy, error: str) -> dict[str, Any]:
    """`compaction_failure` as it is stored (what the fold reads)."""
    return compaction_failure(state, policy, error).to_payload()


class ScriptedSummarizer:
    """Deterministic summaries for the scripted model: the first words of each item.

    A dropped item containing `[fail-summary]` makes the summary fail (to test the breaker).
    """

    async def summarize(self, previous: str | None, items: list[dict[str, Any]]) -> str:
        texts = [item_text(i) for i in items]
        if any("[fail-summary]" in t for t in texts):
            raise CompactionFailed("the scripted summarizer was told to fail ([fail-summary])")
        lines = [
            f"{i.get('role', i.get('type'))}: {' '.join(t.split()[:6])[:60]}"
            for i, t in zip(items, texts, strict=True)
        ]
        head = f"{previous} | " if previous else ""
        text = f"{head}{len(items)} earlier items: " + "; ".join(lines)
        # Bounded, so that summaries of summaries never outgrow the budget they serve.
        return text if len(text) <= SUMMARY_MAX_CHARS else "..." + text[-SUMMARY_MAX_CHARS:]


class ModelSummarizer:
    """Summaries written by the session's own model (OpenAI-compatible endpoints)."""

    def __init__(self, model: ModelClient, model_name: str | None) -> None:
        self.model = model
        self.model_name = model_name

    async def summarize(self, previous: str | None, items: list[dict[str, Any]]) -> str:
        from app.runtime.models.base import ModelRequest  # local: models import nothing of ours

        transcript = "\n".join(f"{i.get('role', i.get('type'))}: {item_text(i)}" for i in items)
        prompt = (
            "Summarize the conversation below in a few sentences, keeping facts, decisions and "
            f"open questions.\nEarlier summary: {previous or '(none)'}\n\n{transcript}"
        )
        request = ModelRequest(
            model=self.model_name or "",
            instructions="You write concise, faithful summaries.",
            items=[{"type": "message", "role": "user", "content": prompt}],
            tools=[],
        )
        response = await self.model.complete(request, lambda _frame: None)
        return response.text.strip()[:SUMMARY_MAX_CHARS]
