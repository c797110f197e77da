"""The compact verbs: manual compaction (`POST .../compact`) and automatic compaction."""

from __future__ import annotations

from typing import Any

from app.runtime.errors import SeqConflict
from app.runtime.memory.compaction import (
    CompactionFailed,
    CompactionPolicy,
    Summarizer,
    compact,
    compacted_memory,
    compaction_failure,
    plan_auto_compaction,
)
from app.runtime.ports import IdempotencyToken, SessionWriter
from app.runtime.runs.agent import agent_spec
from app.runtime.session.event_payloads import BreakerReset
from app.runtime.session.events import Event, NewEvent
from app.runtime.session.service import Loaded, SessionRuntime


def policy_of(agent: dict[str, Any]) -> CompactionPolicy:
    return agent_spec(agent).compaction


async def auto_compact(
    runtime: SessionRuntime,
    tenant_id: str,
    session_id: str,
    summarizer: Summarizer,
    *,
    loaded: Loaded | None = None,
) -> None:
    """Automatic compaction between runs: conditional on the seq it was planned at.

    `loaded` is the session as the caller last wrote it (a run's finishing write), which
    spares a read; the conditional append makes a stale one harmless.
    """
    loaded = loaded or await runtime.load(tenant_id, session_id)
    if loaded.session.active_run_id:
        return
    planned = await plan_auto_compaction(loaded.state, policy_of(loaded.session.agent), summarizer)
    if planned:
        try:
            await runtime.append(
                tenant_id,
                session_id,
                [p.event() for p in planned],
                expected_seq=loaded.session.last_seq,
            )
        except SeqConflict:
            pass  # someone wrote meanwhile; the next turn or run compacts


async def compact_session(
    runtime: SessionRuntime,
    tenant_id: str,
    session_id: str,
    summarizer: Summarizer,
    *,
    strategy: str | None = None,
    overrides: dict[str, Any] | None = None,
    reset_breaker: bool = False,
    idempotency: IdempotencyToken | None = None,
) -> tuple[Loaded, dict[str, Any] | None]:
    """Compact now (and/or reset the breaker). Returns the new state and the compact result.

    A failed summary is recorded but not under the Idempotency-Key: memory did not change,
    so a retry with the key tries again.

    Raises:
        CompactionFailed: the summary failed (the failure is recorded and counts toward the
            breaker).
    """

    async def write(
        loaded: Loaded, writer: SessionWriter
    ) -> tuple[dict[str, Any] | None, CompactionFailed | None]:
        policy = policy_of(loaded.session.agent).model_copy(update=overrides or {})
        events: list[NewEvent] = []
        state = loaded.state
        if reset_breaker:
            events.append(BreakerReset().event())
            state = state.copy()
            state.breaker = {"consecutive_failures": 0, "open": False}
        result: dict[str, Any] | None = None
        failed: CompactionFailed | None = None
        if strategy is not None or not reset_breaker:
            try:
                done = await compact(state, policy, summarizer, strategy=strategy)
                result = dict(done.result)
                events.append(compacted_memory(done).event())
            except CompactionFailed as exc:
                failed = exc
                events.append(compaction_failure(state, policy, exc.detail).event())
        await writer.append_events(
            tenant_id,
            session_id,
            events=events,
            expected_seq=loaded.session.last_seq,
            idempotency=idempotency if failed is None else None,
        )
        return result, failed

    # A compaction that lost to another writer is planned again under the session's hold
    # (`SessionRuntime.decided`): a summary then waits on the model with the session held.
    result, failed = await runtime.decided(tenant_id, session_id, write)
    if failed is not None:
        raise failed
    return await runtime.load(tenant_id, session_id), result


def compact_result_of(events: list[Event]) -> dict[str, Any] | None:
    """The compact result a `compact_session` write recorded (None: it only reset the
    breaker), read back from its events."""
    for event in events:
        if event.payload.get("kind") == "compact":
            return event.payload.get("result")
    return None
