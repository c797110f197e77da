"""Approvals over MCP: a run that stops for an approval asks the calling client.

The transport is stateless, so the server cannot send the client a request of its own
(`elicitation/create` needs a back channel). The 2026-07-28 revision asks in the result
instead: the call answers `InputRequiredResult` with one form elicitation per pending tool
call (approve: yes or no) and the session id as its `requestState`; the client retries the
call with the answers, and the retry writes the decisions and continues the session in
one transaction, as `POST /v1/sessions/{id}/approvals` does. A client that declares no
elicitation capability, or speaks an older revision, gets the pending calls and the session
id in the result (`calls.result_of`) and approves over REST.
"""

from __future__ import annotations

import json
from typing import Any

from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from app.api.mcp.calls import Call, CallServices, start_or_find
from app.runtime.ports import RunRecord
from app.runtime.runs.answers import approval_events
from app.runtime.session.events import NewEvent
from app.runtime.session.service import Loaded

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve", "description": "Run this tool call?"}
    },
    "required": ["approve"],
}


def can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    return (
        ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        and capabilities is not None
        and capabilities.elicitation is not None
    )


def ask(run: RunRecord, pending: list[dict[str, Any]]) -> types.InputRequiredResult:
    """One form elicitation per pending approval, keyed by its call id."""
    requests: dict[str, types.InputRequest] = {}
    for p in pending:
        arguments = p.get("arguments")
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments)
        message = f"The agent wants to call {p['name']} with {shown}. Approve?"
        requests[p["call_id"]] = types.ElicitRequest(
            params=types.ElicitRequestFormParams(message=message, requested_schema=_SCHEMA)
        )
    state = json.dumps({"session_id": run.session_id, "run_id": run.run_id})
    return types.InputRequiredResult(input_requests=requests, request_state=state)


async def answered(
    calls: CallServices, call: Call, params: types.CallToolRequestParams
) -> RunRecord | None:
    """The run a retry with the client's answers continues (None: the call carries none)."""
    responses = params.input_responses or {}
    if not responses or not params.request_state:
        return None
    try:
        session_id = json.loads(params.request_state)["session_id"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(session_id, str):
        return None
    decisions: dict[str, str] = {}
    for call_id, response in responses.items():
        approved = (
            isinstance(response, types.ElicitResult)
            and response.action == "accept"
            and bool((response.content or {}).get("approve"))
        )
        decisions[call_id] = "approve" if approved else "reject"

    def prefix(loaded: Loaded) -> list[NewEvent]:
        events: list[NewEvent] = []
        for call_id, decision in decisions.items():
            events += approval_events(loaded, call_id=call_id, decision=decision, reason=None)
        return events

    continuing = Call(
        tenant_id=call.tenant_id,
        tool=call.tool,
        agent=call.agent,
        input=call.input,
        session_id=session_id,
        token=call.token,
        new_session_id=call.new_session_id,
    )
    return await start_or_find(calls, continuing, prefix=prefix)
