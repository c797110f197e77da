"""Payloads of the shared state: the JSON object a session shares with its frontend.

A frontend (AG-UI's `state`, or REST) and the model (the `update_state` tool) edit one JSON
object. Setting it whole is STATE_SET; changing it is STATE_PATCHED, whose `patch` is the JSON
Patch (RFC 6902) exactly as it applied, so a reader of the ledger (an AG-UI stream's
STATE_DELTA) can apply the same patch to its own copy.
"""

from __future__ import annotations

from typing import Any

from app.runtime.session.event_payloads.base import Payload, event_payload
from app.runtime.session.events import EventType


@event_payload(EventType.STATE_SET)
class StateSet(Payload):
    """The shared state was set whole to `state` (a JSON object)."""

    state: dict[str, Any]


@event_payload(EventType.STATE_PATCHED)
class StatePatched(Payload):
    """The shared state changed by `patch`, a JSON Patch (RFC 6902) that applied to it."""

    patch: list[dict[str, Any]]
