"""Runtime objects -> response dicts (shapes declared in `schemas.py`)."""

from __future__ import annotations

from typing import Any

from app.runtime.ports import AppendResult, SessionRecord
from app.runtime.service import Loaded
from app.runtime.state import SessionState


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
        "created_at": record.created_at.isoformat(),
        "updated_at": record.updated_at.isoformat(),
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
        "usage": state.usage,
    }


def recovery_object(loaded: Loaded) -> dict[str, Any]:
    return {
        **loaded.state.to_json(),
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
        "events": [e.to_json() for e in events],
    }
