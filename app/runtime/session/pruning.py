"""Pruning a session's ledger: its prefix up to a snapshot replaced by one marker event.

A long-lived session's ledger grows without bound while its state (memory, usage, pending
calls) is the fold at its last seq, which the newest snapshot already holds. A prune keeps
that snapshot and every event after it, and puts ONE HISTORY_PRUNED event at the
snapshot's seq in place of the events up to it: `seq` stays gapless from there, and every
reader of the ledger (an events page, an SSE replay after an older `Last-Event-ID`, a fork
copying the prefix) meets the marker first and learns which range is gone.

Where to cut is decided here, on the facts the store reads under the session row's lock
(`PruneFacts`): at the newest intact snapshot that no pending call and no active run still
needs, that is a snapshot below the active run's first seq whose state has no pending
call (a call still pending now was then made after it, so its TOOL_CALL and approval
request stay). No such snapshot: nothing is pruned. The snapshot at the cut is kept by
snapshot retention too (`MaintenanceStore.delete_old_snapshots`): it is the base every
fold of the pruned ledger starts from.
"""

from __future__ import annotations

from typing import Any

from app.runtime.ports import PruneFacts
from app.runtime.session import event_payloads as ev
from app.runtime.session.events import Event, EventType, NewEvent

# Why a prune did nothing (`PruneOutcome.reason`).
NO_SNAPSHOT = "no_snapshot"
PENDING_CALLS = "pending_calls"
TOO_FEW_EVENTS = "too_few_events"
BUSY = "busy"


def cut_point(facts: PruneFacts, *, min_events: int = 1) -> int | str:
    """The seq of the snapshot to cut at, or why there is none.

    `min_events`: prune only when at least this many events (about) would go, so a pass
    does not rewrite the head of a ledger for a handful of events each time.
    """
    if not facts.snapshots:
        return NO_SNAPSHOT
    for seq, state in facts.snapshots:
        if state.get("pending"):
            continue
        if seq - facts.history_start < max(1, min_events):
            return TOO_FEW_EVENTS
        return seq
    return PENDING_CALLS


def history_pruned(facts: PruneFacts, cut: int, count: int) -> NewEvent:
    """The marker of a prune at `cut` that removes `count` events: its range starts where
    the ledger's history started (an earlier marker's range carried on), and its count
    adds that marker's."""
    earlier = facts.marker or {}
    first = int(earlier.get("first_seq", facts.history_start))
    total = count + int(earlier.get("events_pruned", 0))
    return ev.HistoryPruned(
        first_seq=first, last_seq=cut, snapshot_seq=cut, events_pruned=total
    ).event()


def pruned_at(events: list[Event]) -> int | None:
    """The seq of the marker a ledger read from its start begins with, if it was pruned."""
    if events and events[0].type == EventType.HISTORY_PRUNED:
        return events[0].seq
    return None


def marker_range(payload: dict[str, Any]) -> tuple[int, int]:
    """(first, last) seq of the range a HISTORY_PRUNED event replaced."""
    return int(payload.get("first_seq", 1)), int(payload.get("last_seq", 0))
