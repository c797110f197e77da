"""Runtime objects -> response dicts (shapes declared in `app/api/rest/schemas.py`).

Every timestamp leaves the service in one format, RFC 3339 in UTC with `Z`
(`2026-05-01T12:00:00.123456Z`, the fraction only when there is one), whether a route answers
with a dict that FastAPI serializes or with a ready JSON response, in events, streams and
NDJSON alike. Token usage always carries its three counters, zero before a run has any.
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from typing import Any

import orjson

from app.runtime.ports import AppendResult, SessionRecord
from app.runtime.session.events import Event
from app.runtime.session.service import Loaded
from app.runtime.session.state import SessionState

_UTC_Z = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC


def session_summary(record: SessionRecord) -> dict[str, Any]:
    return {
        "session_id": record.session_id,
        "root_session_id": record.root_session_id,
        "parent_session_id": record.parent_session_id,
        "forked_from_seq": record.forked_from_seq,
        "status": record.status,
        "metadata": record.metadata,
        "agent": record.agent,
        "binding": record.binding,
        "last_seq": record.last_seq,
        "version": record.version,
        "active_run_id": record.active_run_id,
        "created_at": rfc3339(record.created_at),
        "updated_at": rfc3339(record.updated_at),
        "expires_at": rfc3339(record.expires_at) if record.expires_at else None,
        "idle_ttl_seconds": record.idle_ttl_seconds,
    }


def session_display(loaded: Loaded) -> dict[str, Any]:
    state = loaded.state
    kinds = [i.get("type") for i in state.items]
    return {
        **session_summary(loaded.session),
        "counts": {
            "items": len(state.items),
            "messages": kinds.count("message"),
            "function_calls": kinds.count("function_call"),
            "function_call_outputs": kinds.count("function_call_output"),
            "processes": len(state.processes),
        },
        "estimated_tokens": state.estimated_tokens(),
        "has_summary": state.summary is not None,
        "truncated": state.truncated_through > 0,
        "max_items": state.max_items,
        "last_compact": state.last_compact,
        "breaker": state.breaker,
        "usage": usage_json(state.usage),
    }


def recovery_object(loaded: Loaded) -> dict[str, Any]:
    state = loaded.state.to_json()
    return {
        **state,
        # Always present here (the snapshot row leaves it out while empty): what `restore`
        # installs, and the same object as GET .../shared-state.
        "shared_state": loaded.state.shared_state,
        "usage": usage_json(state.get("usage")),
        "session_id": loaded.session.session_id,
        "version": loaded.session.version,
    }


def memory_json(state: SessionState) -> dict[str, Any]:
    return {"items": state.items, "summary": state.summary}


def append_result(result: AppendResult) -> dict[str, Any]:
    events = result.events
    return {
        "session_id": result.session.session_id,
        "first_seq": events[0].seq if events else result.session.last_seq,
        "last_seq": result.session.last_seq,
        "version": result.session.version,
        "events": [event_json(e) for e in events],
    }


USAGE_COUNTERS = ("input_tokens", "output_tokens", "total_tokens")


def rfc3339(value: datetime | None) -> str | None:
    """A timestamp as RFC 3339 in UTC with `Z` (a naive value is taken to be UTC already):
    `isoformat()` of the value in UTC, with `Z` for `+00:00`, as orjson writes it in a
    fraction of the time (every event of every page and stream carries one)."""
    if value is None:
        return None
    return _utc_json(value)[1:-1].decode()


def _utc_json(value: datetime) -> bytes:
    """`value` in UTC as a JSON string, by `rfc3339`'s rule."""
    zone = value.tzinfo
    if zone is not UTC and zone is not None and value.utcoffset():
        value = value.astimezone(UTC)
    try:
        return orjson.dumps(value, option=_UTC_Z)
    except TypeError:  # a subclass of datetime, which orjson does not take
        if zone is None:
            value = value.replace(tzinfo=UTC)
        return b'"%s"' % value.astimezone(UTC).isoformat().replace("+00:00", "Z").encode()


def rfc3339_text(value: str | None) -> str | None:
    """`rfc3339` for a timestamp the runtime already wrote as ISO 8601 text."""
    return rfc3339(datetime.fromisoformat(value)) if value else value


def event_json(event: Event) -> dict[str, Any]:
    """An event's wire shape with its time in the service's one format. The payload is the
    ledger's, as it was written."""
    body = event.fields()
    body["created_at"] = rfc3339(event.created_at)
    return body


def event_json_bytes(event: Event) -> bytes:
    """`event_json` as `json_bytes` writes it, in one orjson call where the time is in UTC
    (orjson writes it too)."""
    created_at = event.created_at
    if created_at.tzinfo is UTC or created_at.tzinfo is None:
        with contextlib.suppress(TypeError):  # orjson.JSONEncodeError is one
            return orjson.dumps(event.fields(), option=_UTC_Z)
    return json_bytes(event_json(event))


def json_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON: by orjson, several times faster, unless it refuses the value (an
    integer beyond 64 bits, a key that is not a string), which the standard library then
    writes exactly. Compact JSON holds no line break, so it is one `data:` line as it is."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def usage_json(usage: dict[str, int] | None) -> dict[str, int]:
    """Token usage with every counter present: zero for what nothing has used yet."""
    return {**dict.fromkeys(USAGE_COUNTERS, 0), **(usage or {})}


def process_json(view: dict[str, Any]) -> dict[str, Any]:
    """A process view with its times in the service's one format."""
    return {
        **view,
        "started_at": rfc3339_text(view.get("started_at")),
        "finished_at": rfc3339_text(view.get("finished_at")),
    }
