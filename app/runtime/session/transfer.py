"""Export and import of one session's ledger as JSON Lines.

The first line is a header naming the format and the session's row fields (metadata, agent
spec, binding) that the events alone do not carry, e.g. a fork's own metadata; every further
line is one event in its wire shape (docs/reference/events.md), in seq order. Import writes the same
events (types, payloads, run and turn ids, order) into a new session in one transaction, so
the new ledger folds to the same state: what `asr sessions export` / `import` do.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from typing import Any

from app.runtime.errors import InvalidRequest
from app.runtime.ports import NewSession
from app.runtime.session.events import NewEvent
from app.runtime.session.json_limits import scan_json_bytes
from app.runtime.session.service import Loaded, SessionRuntime

EXPORT_FORMAT = "asr.session-ledger.v1"
_BATCH = 1000
_MAX_TYPE = 64


async def export_ledger(
    runtime: SessionRuntime, tenant_id: str, session_id: str
) -> AsyncIterator[dict[str, Any]]:
    """The header, then every event of the session up to its last seq at export time."""
    record = await runtime.get(tenant_id, session_id)
    yield {
        "format": EXPORT_FORMAT,
        "session_id": record.session_id,
        "last_seq": record.last_seq,
        "metadata": record.metadata,
        "agent": record.agent,
        "binding": record.binding,
        "root_session_id": record.root_session_id,
        "parent_session_id": record.parent_session_id,
        "forked_from_seq": record.forked_from_seq,
        "exported_at": datetime.now(UTC).isoformat(),
    }
    cursor = 0
    while cursor < record.last_seq:
        batch = await runtime.list_events(
            tenant_id, session_id, after_seq=cursor, until_seq=record.last_seq, limit=_BATCH
        )
        if not batch:
            raise RuntimeError(f"ledger of {session_id} ends at {cursor}, row says more")
        for event in batch:
            yield event.to_json()
        cursor = batch[-1].seq


def parse_export(lines: Iterable[str]) -> tuple[dict[str, Any], list[NewEvent]]:
    """(header, events) from export lines; raises InvalidRequest naming the bad line."""
    header: dict[str, Any] | None = None
    events: list[NewEvent] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            scan_json_bytes(line.encode())  # before the (recursive) parser sees it
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidRequest(f"line {number}: not JSON ({exc.msg})") from None
        except InvalidRequest as exc:
            raise InvalidRequest(f"line {number}: {exc.detail}", **exc.extra) from None
        if header is None:
            if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
                raise InvalidRequest(f"line {number}: expected a {EXPORT_FORMAT} header")
            header = data
            continue
        events.append(_event_of(data, number, expected_seq=len(events) + 1))
    if header is None:
        raise InvalidRequest("empty export")
    if header.get("last_seq") != len(events):
        raise InvalidRequest(f"header says {header.get('last_seq')} events, found {len(events)}")
    return header, events


def _event_of(data: Any, number: int, *, expected_seq: int) -> NewEvent:
    if not isinstance(data, dict):
        raise InvalidRequest(f"line {number}: an event must be a JSON object")
    if data.get("seq") != expected_seq:
        raise InvalidRequest(f"line {number}: seq {data.get('seq')}, expected {expected_seq}")
    kind = data.get("type")
    if not isinstance(kind, str) or not 0 < len(kind) <= _MAX_TYPE:
        raise InvalidRequest(f"line {number}: missing or invalid event type")
    payload = data.get("payload")
    if not isinstance(payload, dict):
        raise InvalidRequest(f"line {number}: payload must be an object")
    # Copied as stored, not rebuilt from a payload model: an export may hold older payload
    # shapes and types this release does not know, and the import must keep them all.
    return NewEvent(kind, payload, run_id=data.get("run_id"), turn_id=data.get("turn_id"))


async def import_ledger(
    runtime: SessionRuntime,
    tenant_id: str,
    header: dict[str, Any],
    events: list[NewEvent],
    *,
    session_id: str | None = None,
) -> Loaded:
    """Create a new session (its own root) holding exactly `events`, in one transaction.

    The new session's state is then loaded like any other: the fold of its ledger (with an
    automatic snapshot when the ledger is long).
    """
    if not events:
        raise InvalidRequest("an export holds at least one event")
    new_id = session_id or str(uuid.uuid4())
    session = NewSession(
        session_id=new_id,
        metadata=dict(header.get("metadata") or {}),
        agent=dict(header.get("agent") or {}),
        binding=dict(header.get("binding") or {}),
    )
    return await runtime.create_imported(tenant_id, session, events)
