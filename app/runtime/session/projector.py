"""The projector: fold a session's events into its `SessionState`.

`fold(state, events)` is pure and total: it never mutates its input (items are shared,
never edited in place), and an event type it
does not know is skipped (old ledgers and newer writers never crash a reader). Only the
memory event types change memory; MODEL_RESPONSE contributes token usage, and
PROCESS_STARTED / PROCESS_EXITED keep the session's process snapshots.

Dispatch is one table, `HANDLERS`, from event type to the function that folds it. Handlers
read the stored payload dicts with defaults rather than the payload models: a ledger holds
payloads of every release, and folding a long one must not build an object per event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from app.runtime.errors import InvalidPatch
from app.runtime.memory.calibration import observe
from app.runtime.session.events import Event, EventType
from app.runtime.session.json_patch import apply_patch
from app.runtime.session.state import SessionState

# Folds one event's payload into the state; the seq is for handlers that point back at it.
Handler = Callable[[SessionState, dict[str, Any], int], None]


def _append_items(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    state.items.extend(payload.get("items") or [])


def _append_item(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    item = payload.get("item")
    if item is not None:
        state.items.append(item)


def _tool_result(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    _append_item(state, payload, seq)
    item = payload.get("item") or {}
    state.pending.pop(item.get("call_id", ""), None)


def _tool_call(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    call_id = payload.get("call_id")
    if call_id:
        state.pending[call_id] = {
            "name": payload.get("name"),
            "arguments": payload.get("arguments", "{}"),
            "kind": payload.get("kind", "server"),
            "run_id": payload.get("run_id"),
            "decision": None,
        }


def _approval_decided(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    call = state.pending.get(payload.get("call_id", ""))
    if call is not None:
        state.pending[payload["call_id"]] = {
            **call,
            "decision": payload.get("decision"),
            "reason": payload.get("reason"),
        }


def _replace_tool_output(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    # Replace the item rather than edit it: states and snapshots share item dicts.
    call_id = payload.get("call_id")
    for index in range(len(state.items) - 1, -1, -1):
        item = state.items[index]
        if item.get("type") == "function_call_output" and item.get("call_id") == call_id:
            state.items[index] = {**item, "output": payload.get("output", "")}
            return


def _compress(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    # A projection report shaped one prompt and left memory alone; only a compact result
    # (kind "compact") rewrites memory. Failures and resets move the circuit breaker.
    kind = payload.get("kind")
    if kind == "compact_failed":
        state.breaker = dict(payload.get("breaker") or state.breaker)
        return
    if kind == "breaker_reset":
        state.breaker = {"consecutive_failures": 0, "open": False}
        return
    if kind != "compact":
        return
    memory = payload.get("memory") or {}
    state.items = list(memory.get("items") or [])
    state.summary = memory.get("summary")
    state.last_compact = payload.get("result")
    state.breaker = {"consecutive_failures": 0, "open": False}
    if (payload.get("result") or {}).get("items_removed"):
        state.truncated_through = seq  # what it removed is read back from the ledger


def _restore(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    baseline = payload.get("state") or {}
    memory = baseline.get("memory") or {}
    state.items = list(memory.get("items") or [])
    state.summary = memory.get("summary")
    state.max_items = baseline.get("max_items")
    if isinstance(baseline.get("shared_state"), dict):
        state.shared_state = baseline["shared_state"]
    state.pending = {}  # the baseline replaces the calls those pending entries belonged to


def _change_window(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    state.max_items = payload.get("max_items")


def _add_usage(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    usage = payload.get("usage") or {}
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        value = usage.get(key)
        if isinstance(value, int):
            state.usage[key] = state.usage.get(key, 0) + value
    seen = payload.get("calibration")
    if isinstance(seen, dict) and seen.get("key"):
        key = str(seen["key"])
        state.calibration[key] = observe(
            state.calibration.get(key),
            int(seen.get("estimated_tokens") or 0),
            int(seen.get("input_tokens") or 0),
        )


def _process_started(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    process_id = payload.get("process_id")
    if not process_id:
        return
    state.processes[process_id] = {
        "process_id": process_id,
        "pid": payload.get("pid"),
        "command": list(payload.get("command") or []),
        "workspace": payload.get("workspace"),
        "run_id": payload.get("run_id"),
        "started_at": payload.get("started_at"),
        "started_seq": seq,
        "status": "running",
        "exit_code": None,
        "reason": None,
        "output_bytes": 0,
        "finished_at": None,
        "exited_seq": None,
    }


def _process_exited(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    # "service_stopped": the service ended while the process ran and killed it; the process
    # did not finish on its own, so readers see it as restored, with its last known output.
    process_id = payload.get("process_id")
    if not process_id:
        return
    known = state.processes.get(process_id) or {"process_id": process_id, "command": []}
    reason = payload.get("reason")
    state.processes[process_id] = {
        **known,
        "status": "restored" if reason == "service_stopped" else "exited",
        "exit_code": payload.get("exit_code"),
        "reason": reason,
        "output_bytes": payload.get("output_bytes", known.get("output_bytes", 0)),
        "finished_at": payload.get("finished_at"),
        "exited_seq": seq,
    }


def _forked(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    # A fork copies the parent's process records but not the processes: they keep running
    # for the parent, so in the child they are history.
    for process_id, process in list(state.processes.items()):
        if process.get("status") == "running":
            state.processes[process_id] = {**process, "status": "restored", "reason": "forked"}


def _state_set(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    value = payload.get("state")
    state.shared_state = value if isinstance(value, dict) else {}


def _state_patched(state: SessionState, payload: dict[str, Any], seq: int) -> None:
    # Written only after it applied to the state at this seq, so it applies here too; a
    # patch that does not (a hand-edited import) is skipped rather than crash a reader.
    try:
        value = apply_patch(state.shared_state, payload.get("patch"))
    except InvalidPatch:
        return
    if isinstance(value, dict):
        state.shared_state = value


def _windowed(handler: Handler) -> Handler:
    """`handler`, then window eviction: for the types that can grow memory or shrink the
    window, so memory is cut back to its window by the very event that overflowed it."""

    def apply(state: SessionState, payload: dict[str, Any], seq: int) -> None:
        handler(state, payload, seq)
        if state.max_items is not None:
            before = len(state.items)
            state.items = evict_to_window(state.items, state.max_items)
            if len(state.items) < before:
                state.truncated_through = seq

    return apply


# Every event type that changes state, and how; the others (and unknown ones) fold to no
# change but the seq.
HANDLERS: dict[str, Handler] = {
    EventType.SESSION_FORKED: _forked,
    EventType.SESSION_RESTORED: _windowed(_restore),
    EventType.USER_INPUT: _windowed(_append_item),
    EventType.MEMORY_ITEMS_APPENDED: _windowed(_append_items),
    EventType.TOOL_RESULT: _windowed(_tool_result),
    EventType.TOOL_OUTPUT_REPLACED: _replace_tool_output,
    EventType.MEMORY_COMPRESS: _compress,
    EventType.WINDOW_CHANGED: _windowed(_change_window),
    EventType.MODEL_RESPONSE: _add_usage,
    EventType.TOOL_CALL: _tool_call,
    EventType.APPROVAL_DECIDED: _approval_decided,
    EventType.PROCESS_STARTED: _process_started,
    EventType.PROCESS_EXITED: _process_exited,
    EventType.STATE_SET: _state_set,
    EventType.STATE_PATCHED: _state_patched,
}


def cut_points(items: list[dict[str, Any]]) -> list[int]:
    """Where memory may be cut so that the kept suffix is whole.

    Starts of interactions (user messages). Memory with no user message at all may be cut
    before any item that is not a tool output, so a call is never parted from its output.
    """
    cuts = [i for i, item in enumerate(items) if i > 0 and _is_user_message(item)]
    if not cuts and not any(_is_user_message(i) for i in items):
        cuts = [i for i, item in enumerate(items) if i > 0 and not _is_output(item)]
    return cuts


def cuts_newest_first(items: list[dict[str, Any]]) -> Iterator[int]:
    """`cut_points(items)`, newest first and found lazily: a caller that stops early reads
    only the items after where it stopped (unless memory has no user message after its
    first item, which takes one pass to learn)."""
    users = (i for i in range(len(items) - 1, 0, -1) if _is_user_message(items[i]))
    newest = next(users, None)
    if newest is not None:
        yield newest
        yield from users
    elif not (items and _is_user_message(items[0])):
        yield from (i for i in range(len(items) - 1, 0, -1) if not _is_output(items[i]))


def evict_to_window(items: list[dict[str, Any]], max_items: int | None) -> list[dict[str, Any]]:
    """FIFO eviction of whole interactions until at most `max_items` remain.

    An interaction is a user message and everything up to the next user message, so no
    assistant reply or tool output outlives the input that caused it. The newest interaction
    is never split: a window smaller than it keeps that interaction whole.
    """
    if max_items is None or len(items) <= max_items:
        return items
    cuts = cut_points(items)
    for cut in cuts:
        if len(items) - cut <= max_items:
            return items[cut:]
    return items[cuts[-1] :] if cuts else items


def _is_output(item: dict[str, Any]) -> bool:
    return item.get("type") == "function_call_output"


def _is_user_message(item: dict[str, Any]) -> bool:
    return item.get("type") == "message" and item.get("role") == "user"


def apply_event(state: SessionState, event: Event) -> None:
    """Fold one event into `state` in place (callers own the state they pass)."""
    if event.seq <= state.seq:
        return  # already folded: a snapshot at or past this event covers it
    handler = HANDLERS.get(event.type)
    if handler is not None:
        handler(state, event.payload, event.seq)
    state.seq = event.seq


def fold(state: SessionState | None, events: Iterable[Event]) -> SessionState:
    """Return the state after `events`, starting from a copy of `state` (or empty)."""
    current = state.copy() if state is not None else SessionState()
    for event in events:
        apply_event(current, event)
    return current
