"""What a client writes between runs: results of its own tool calls, replaced outputs, and
approval decisions. Each is decided on the session's current state (`SessionRuntime.decided`),
so two answers racing each other cannot both land: the second finds nothing pending."""

from __future__ import annotations

from collections.abc import Callable

from app.runtime.errors import NothingPending, RunAlreadyActive
from app.runtime.ports import AppendResult, IdempotencyToken, SessionWriter
from app.runtime.session import event_payloads as ev
from app.runtime.session.events import NewEvent
from app.runtime.session.service import Loaded, SessionRuntime

# Events decided on a session as read (`Loaded`), to be written only if it is still that.
Prefix = Callable[[Loaded], list[NewEvent]]


def answer_events(
    loaded: Loaded, outputs: list[dict[str, str]], *, replace: bool
) -> list[NewEvent]:
    """The events that answer pending client tool calls (TOOL_RESULT), or replace earlier
    outputs (TOOL_OUTPUT_REPLACED), checked against the session as `loaded` has it.

    Raises:
        RunAlreadyActive: a run is active on the session.
        NothingPending: a call id is not pending (or, with replace, has no output).
    """
    if loaded.session.active_run_id:
        raise RunAlreadyActive(loaded.session.active_run_id)
    answered = {i["call_id"] for i in loaded.state.items if i.get("type") == "function_call_output"}
    events: list[NewEvent] = []
    for out in outputs:
        call_id, output = out["call_id"], out["output"]
        if replace:
            if call_id not in answered:
                raise NothingPending(f"call {call_id!r} has no output to replace")
            events.append(ev.ToolOutputReplaced(call_id=call_id, output=output).event())
            continue
        call = loaded.state.pending.get(call_id)
        if call is None or call.get("kind") != "client":
            raise NothingPending(f"call {call_id!r} is not a pending client tool call")
        events.append(ev.ToolResult.answering(call_id, output, is_error=False).event())
    return events


def approval_events(
    loaded: Loaded, *, call_id: str, decision: str, reason: str | None
) -> list[NewEvent]:
    """APPROVAL_DECIDED for a pending approval, checked against the session as `loaded` has
    it; the next run acts on it.

    Raises:
        RunAlreadyActive, NothingPending.
    """
    if loaded.session.active_run_id:
        raise RunAlreadyActive(loaded.session.active_run_id)
    call = loaded.state.pending.get(call_id)
    if call is None or call.get("kind") != "approval" or call.get("decision") is not None:
        raise NothingPending(f"call {call_id!r} is not waiting for an approval")
    decided = ev.ApprovalDecided(
        call_id=call_id, decision=decision, reason=reason, name=call.get("name")
    )
    return [decided.event()]


async def append_checked(
    runtime: SessionRuntime,
    tenant_id: str,
    session_id: str,
    make_events: Prefix,
    *,
    idempotency: IdempotencyToken | None = None,
) -> AppendResult:
    """Append the events `make_events` decides on the session's current state
    (`SessionRuntime.decided`: never lost to another writer)."""

    async def write(loaded: Loaded, writer: SessionWriter) -> AppendResult:
        return await writer.append_events(
            tenant_id,
            session_id,
            events=make_events(loaded),
            expected_seq=loaded.session.last_seq,
            idempotency=idempotency,
        )

    return await runtime.decided(tenant_id, session_id, write)
