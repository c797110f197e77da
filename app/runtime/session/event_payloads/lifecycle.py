"""Payloads of the lifecycle events: a session is created, saved, resumed, forked, restored,
or its metadata changes."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from app.runtime.session.event_payloads.base import OMIT_IF_NONE, Payload, event_payload
from app.runtime.session.events import EventType


@event_payload(EventType.SESSION_CREATED)
class SessionCreated(Payload):
    """A session was created; a delegated child also names its parent and its tree's root."""

    metadata: dict[str, Any]
    agent: dict[str, Any]
    binding: dict[str, Any]
    parent_session_id: str | None = field(default=None, metadata=OMIT_IF_NONE)
    root_session_id: str | None = field(default=None, metadata=OMIT_IF_NONE)


@event_payload(EventType.SESSION_SAVED)
class SessionSaved(Payload):
    """A `save` snapshot of the state was written at `snapshot_seq` (this event's own seq)."""

    snapshot_seq: int


@event_payload(EventType.SESSION_RESUMED)
class SessionResumed(Payload):
    """The session was resumed at `resumed_at_seq` with the binding it is bound to."""

    resumed_at_seq: int
    binding: dict[str, Any]


@event_payload(EventType.SESSION_FORKED)
class SessionForked(Payload):
    """This session was forked from its parent's state at `forked_from_seq`.

    `rebound_to` is present only when the fork moved the child to another binding.
    """

    parent_session_id: str
    forked_from_seq: int
    root_session_id: str
    rebound_to: dict[str, Any] | None = field(default=None, metadata=OMIT_IF_NONE)


@event_payload(EventType.SESSION_RESTORED)
class SessionRestored(Payload):
    """A recovery object (from GET state) was installed as the memory baseline.

    `state` is the validated recovery object: `memory` (items, summary) and `max_items`.
    """

    state: dict[str, Any]


@event_payload(EventType.METADATA_UPDATED)
class MetadataUpdated(Payload):
    """The session's metadata changed by an RFC 7386 merge `patch` (null deletes a key)."""

    patch: dict[str, Any]


@event_payload(EventType.HISTORY_PRUNED)
class HistoryPruned(Payload):
    """The ledger's prefix `first_seq` .. `last_seq` was pruned, and this marker stands in
    its place at `last_seq` (its own seq), so `seq` stays gapless: history starts here. The
    memory at `last_seq` is the snapshot kept at `snapshot_seq` (the same seq); what a reader
    of the events needs before it is gone. `events_pruned` counts every event this session's
    prunes removed so far (the replaced markers not included)."""

    first_seq: int
    last_seq: int
    snapshot_seq: int
    events_pruned: int
