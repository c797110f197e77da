"""The session's shared state: the JSON object its frontend and its model both edit.

The checks every writer of it passes (a frontend over REST or AG-UI, the model's
`update_state` tool), and the events a change becomes. The value itself is folded by the
projector (`SessionState.shared_state`) from STATE_SET and STATE_PATCHED.
"""

from __future__ import annotations

import json
from typing import Any

from app.runtime.errors import InvalidPatch, PayloadTooLarge
from app.runtime.session import event_payloads as ev
from app.runtime.session.events import NewEvent
from app.runtime.session.json_limits import check_json_value
from app.runtime.session.json_patch import apply_patch, json_equal


def check_state_size(state: dict[str, Any], *, limit: int) -> None:
    """Raises PayloadTooLarge when the encoded state exceeds `limit` bytes."""
    size = len(json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode())
    if size > limit:
        raise PayloadTooLarge(f"the shared state is {size} bytes; the limit is {limit}")


def checked_state(value: Any, *, limit: int) -> dict[str, Any]:
    """`value` if it may become the shared state: a JSON object, finite, not too deep, small.

    Raises:
        InvalidPatch: not an object (a patch that left something else, say a list).
        JsonTooDeep, NonFiniteNumber, PayloadTooLarge.
    """
    if not isinstance(value, dict):
        raise InvalidPatch("the shared state must stay a JSON object")
    check_json_value(value)
    check_state_size(value, limit=limit)
    return value


def set_events(
    current: dict[str, Any],
    value: Any,
    *,
    limit: int,
    run_id: str | None = None,
) -> list[NewEvent]:
    """STATE_SET of `value`, or nothing when the state already is `value`."""
    new = checked_state(value, limit=limit)
    if json_equal(current, new):
        return []
    return [ev.StateSet(state=new).event(run_id=run_id)]


def patch_events(
    current: dict[str, Any],
    patch: Any,
    *,
    limit: int,
    run_id: str | None = None,
    turn_id: str | None = None,
) -> list[NewEvent]:
    """STATE_PATCHED of `patch`, decided on `current`: it must apply, and leave an object
    within the limit. A patch that changes nothing (only `test`s, say) writes nothing.

    Raises:
        InvalidPatch, JsonTooDeep, NonFiniteNumber, PayloadTooLarge.
    """
    if isinstance(patch, list):
        check_json_value(patch)
    new = checked_state(apply_patch(current, patch), limit=limit)
    if json_equal(current, new):
        return []
    return [ev.StatePatched(patch=patch).event(run_id=run_id, turn_id=turn_id)]
