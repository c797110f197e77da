"""`SessionState`: the fold of a session's ledger at one seq, and its JSON form.

A snapshot row stores `SessionState.to_json()`; `from_json` accepts older snapshots that lack
newer fields (they take their defaults), so adding a field never breaks resume.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.runtime.errors import InvalidState
from app.runtime.memory.items import estimate_tokens, normalize_items

STATE_FORMAT = 1


def _zero_usage() -> dict[str, int]:
    return {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}


def _closed_breaker() -> dict[str, Any]:
    return {"consecutive_failures": 0, "open": False}


@dataclass
class SessionState:
    """Memory (items + summary) and the bookkeeping that travels with it, at `seq`."""

    seq: int = 0
    items: list[dict[str, Any]] = field(default_factory=list)
    summary: str | None = None
    max_items: int | None = None
    usage: dict[str, int] = field(default_factory=_zero_usage)
    last_compact: dict[str, Any] | None = None
    breaker: dict[str, Any] = field(default_factory=_closed_breaker)
    # Tool calls waiting for an output: call_id -> {name, arguments, kind, run_id, decision}.
    # kind is "server", "client" (the caller answers) or "approval" (needs a decision).
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The seq of the last event that evicted or compacted items away (0: memory is whole).
    truncated_through: int = 0
    # Background processes of the session: process_id -> snapshot (command, status, exit
    # code, output size). Folded from PROCESS_STARTED / PROCESS_EXITED; never the output.
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # What the providers' token counts taught the estimate: "<profile>/<model>" -> {ratio,
    # samples, last_estimated_tokens, last_input_tokens} (calibration.py).
    calibration: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The JSON object the session shares with its frontend (AG-UI `state`), folded from
    # STATE_SET / STATE_PATCHED. Replaced, never edited in place, like items.
    shared_state: dict[str, Any] = field(default_factory=dict)

    def memory_json(self) -> dict[str, Any]:
        """Memory alone: what "projection equals live memory" compares."""
        return {"items": self.items, "summary": self.summary}

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": STATE_FORMAT,
            "seq": self.seq,
            "memory": self.memory_json(),
            "max_items": self.max_items,
            "usage": self.usage,
            "last_compact": self.last_compact,
            "breaker": self.breaker,
            "pending": self.pending,
            "truncated_through": self.truncated_through,
        }
        if self.processes:
            # Only when there are any: a session that never ran a process keeps exactly the
            # snapshot shape (and content hash) it had before processes existed.
            data["processes"] = self.processes
        if self.calibration:
            data["calibration"] = self.calibration  # only once learnt, as for processes
        if self.shared_state:
            data["shared_state"] = self.shared_state  # only once set, as for processes
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionState:
        memory = data.get("memory") or {}
        return cls(
            seq=int(data.get("seq", 0)),
            items=list(memory.get("items") or []),
            summary=memory.get("summary"),
            max_items=data.get("max_items"),
            usage={**_zero_usage(), **(data.get("usage") or {})},
            last_compact=data.get("last_compact"),
            breaker={**_closed_breaker(), **(data.get("breaker") or {})},
            pending={k: dict(v) for k, v in (data.get("pending") or {}).items()},
            truncated_through=int(data.get("truncated_through", 0)),
            processes={k: dict(v) for k, v in (data.get("processes") or {}).items()},
            calibration={k: dict(v) for k, v in (data.get("calibration") or {}).items()},
            shared_state=dict(data.get("shared_state") or {}),
        )

    def copy(self) -> SessionState:
        """A copy that may be folded further without touching this one.

        Shallow on purpose: items are never edited in place (the projector replaces an item
        to change it), so states can share item dicts and a copy costs O(items), not a deep
        copy of every message.
        """
        return SessionState(
            seq=self.seq,
            items=list(self.items),
            summary=self.summary,
            max_items=self.max_items,
            usage=dict(self.usage),
            last_compact=self.last_compact,
            breaker=dict(self.breaker),
            pending={k: dict(v) for k, v in self.pending.items()},
            truncated_through=self.truncated_through,
            processes={k: dict(v) for k, v in self.processes.items()},
            calibration={k: dict(v) for k, v in self.calibration.items()},
            shared_state=self.shared_state,
        )

    def estimated_tokens(self) -> int:
        return estimate_tokens(self.items, self.summary)


def state_hash(state_json: dict[str, Any]) -> str:
    """Content hash stored beside a snapshot and checked on load (a torn row never resumes)."""
    blob = json.dumps(state_json, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def state_intact(state_json: dict[str, Any], stored_hash: str) -> bool:
    """Whether `state_json` is the state whose `state_hash` is `stored_hash`.

    The canonical text is first built by orjson (`quick_state_intact`); only when that
    differs is the standard library's text hashed as well, so a state passes exactly when
    `state_hash` says it should.
    """
    return quick_state_intact(state_json, stored_hash) or state_hash(state_json) == stored_hash


def quick_state_intact(state_json: dict[str, Any], stored_hash: str) -> bool:
    """`state_hash(state_json) == stored_hash`, computed on orjson's text: sorted keys,
    compact, UTF-8, the same bytes as `state_hash`'s for every string, integer and float
    orjson writes, and several times faster than `json.dumps` on a large memory. False
    when orjson's text differs or orjson refuses the value (an integer beyond 64 bits);
    a match means the state serialises to the very text that was hashed when written.
    """
    try:
        blob = orjson.dumps(state_json, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return False
    return hashlib.sha256(blob).hexdigest() == stored_hash


def validate_recovery_object(data: dict[str, Any], *, max_inline_bytes: int) -> dict[str, Any]:
    """Check a client-supplied recovery object (the body of restore) and canonicalise it.

    Its `shared_state`, when present, is installed too; an object without one (written
    before shared state existed) leaves the session's shared state as it is.

    Raises:
        InvalidState: the object is not a recovery object this service can install.
    """
    memory = data.get("memory")
    if not isinstance(memory, dict):
        raise InvalidState("state.memory must be an object with items and summary")
    items = memory.get("items", [])
    if not isinstance(items, list):
        raise InvalidState("state.memory.items must be a list")
    summary = memory.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise InvalidState("state.memory.summary must be a string or null")
    max_items = data.get("max_items")
    if max_items is not None and (not isinstance(max_items, int) or max_items < 1):
        raise InvalidState("state.max_items must be a positive integer or null")
    try:
        clean = normalize_items(items, max_inline_bytes=max_inline_bytes)
    except Exception as exc:
        raise InvalidState(str(exc)) from exc
    out: dict[str, Any] = {"memory": {"items": clean, "summary": summary}, "max_items": max_items}
    if "shared_state" in data:
        shared = data["shared_state"]
        if not isinstance(shared, dict):
            raise InvalidState("state.shared_state must be an object")
        out["shared_state"] = shared
    return out
