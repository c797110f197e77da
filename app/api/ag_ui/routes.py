"""`POST /v1/ag-ui`: the AG-UI protocol (CopilotKit frontends) over our sessions and runs.

A `RunAgentInput` comes in; an AG-UI event stream (Server-Sent Events) goes out. The call
maps onto the service one to one:

- `threadId` is a session of the caller's tenant, created on first use with the agent the
  route names (`/v1/ag-ui/{agent_name}`, or `forwardedProps.agent_name`);
- `runId` is one run: it is the run start's idempotency key, recorded in the start's own
  transaction, so the same `runId` twice streams the same run again and never starts two;
- `messages` are reconciled with memory by id (`ag_ui_history`), and what is new is written
  with the run's start in one transaction; a tool message answering a pending client tool
  call becomes its output; a client whose history lacks what the session has (a reloaded
  page) gets a MESSAGES_SNAPSHOT of the conversation as the run starts from it;
- `tools` are the run's client tools: a call of one ends the run with the call pending
  (TOOL_CALL_* events, RUN_FINISHED), and the next call's tool message answers it;
- a tool that needs approval ends the run with an `interrupt` outcome; the next call's
  `resume` approves (`resolved`) or rejects (`cancelled`, or `payload.approved: false`);
- `state` is the session's shared state: a non-empty object that differs from the stored
  one is written (STATE_SET) with the run's start; the stream sends STATE_SNAPSHOT of the
  state the run starts from, then a STATE_DELTA for each change the run makes. An empty or
  absent `state` (a page that has none yet, a reload) leaves the stored state as it is.

Every AG-UI run is an ordinary run: it is in the ledger and in `GET .../runs`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

from ag_ui.core import BaseEvent, Message, MessagesSnapshotEvent, RunAgentInput
from ag_ui.encoder import EventEncoder
from fastapi import APIRouter, Body, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from app.api.ag_ui.history import lags_behind, reconcile, snapshot_messages
from app.api.ag_ui.stream import Translator, state_snapshot_event
from app.api.http.deps import BlueprintsDep, RunsDep, RunStreamsDep, RuntimeDep, TenantDep
from app.api.http.inputs import SESSION_ID_PATTERN
from app.api.http.problems import problem_responses
from app.live.run_follow import RunFollow, RunStreams
from app.live.stream_response import StreamResponse
from app.live.timeline import StreamEnd
from app.runtime.access.accounts import Principal
from app.runtime.errors import (
    AgentSessionError,
    Conflict,
    IdempotentReplay,
    InvalidRequest,
    NothingPending,
    SessionAlreadyExists,
    SessionNotFound,
    StaleSession,
    ToolCallsPending,
)
from app.runtime.memory.items import tool_output_item
from app.runtime.ports import IdempotencyToken, RunRecord
from app.runtime.runs.agent import AgentSpec
from app.runtime.runs.answers import answer_events, approval_events
from app.runtime.runs.blueprints import Blueprints
from app.runtime.runs.manager import RunManager
from app.runtime.runs.plan import RunRequest
from app.runtime.session import event_payloads as ev
from app.runtime.session.events import Event, NewEvent
from app.runtime.session.projector import fold
from app.runtime.session.service import Loaded, SessionRuntime
from app.runtime.session.shared_state import set_events
from app.runtime.session.subscription import Ephemeral

router = APIRouter(prefix="/v1/ag-ui", tags=["ag-ui"])

_THREAD_ID = re.compile(SESSION_ID_PATTERN)
# The body is validated with the protocol's own model here, not by FastAPI: as a parameter
# type, the protocol's models would enter our components under their own names (`TextPart`,
# `Tool`, …) and rename ours. The document describes it as `AgUiRunAgentInput` instead
# (`ag_ui_schema`).
AgUiInput = Annotated[
    dict[str, Any],
    Body(
        description="An AG-UI `RunAgentInput` (https://docs.ag-ui.com/sdk/js/core/types): "
        "threadId, runId, messages, tools, context, state, forwardedProps, resume.",
    ),
]
_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "AG-UI events as Server-Sent Events (`data:` = one AG-UI event JSON)",
        "content": {"text/event-stream": {"schema": {"type": "object"}}},
    }
}


def run_agent_input(raw: dict[str, Any]) -> RunAgentInput:
    """The body as the protocol's model; a body that is not one is a 422 like any other."""
    try:
        return RunAgentInput.model_validate(raw)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from exc


def session_id_of(thread_id: str) -> str:
    """The session of a thread: the thread id itself when it is a valid session id, else a
    stable digest of it (AG-UI thread ids are free-form strings)."""
    if _THREAD_ID.match(thread_id):
        return thread_id
    return "agui-" + hashlib.sha256(thread_id.encode()).hexdigest()[:40]


def run_token(thread_id: str, run_id: str) -> IdempotencyToken:
    """The run start's idempotency key, derived from the AG-UI ids only: a client that
    retries a `runId` (with whatever body) gets that run, never a second one."""
    digest = hashlib.sha256(f"{thread_id}\0{run_id}".encode()).hexdigest()
    return IdempotencyToken(key=f"ag-ui:{digest[:48]}", request_hash=digest)


@router.post(
    "",
    summary="AG-UI: RunAgentInput in, AG-UI events out (SSE)",
    response_class=Response,
    responses={**_DOC, **problem_responses(401, 404, 409, 422)},
)
async def run_ag_ui(
    raw: AgUiInput,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    runs: RunsDep,
    streams: RunStreamsDep,
    blueprints: BlueprintsDep,
) -> Response:
    """Run the agent of the thread's session for an AG-UI client (CopilotKit, `@ag-ui/client`'s
    `HttpAgent`) and stream the run as AG-UI events. The agent of a new thread's session is
    `forwardedProps.agent_name` (a blueprint), else the default agent.
    """
    body = run_agent_input(raw)
    props = body.forwarded_props if isinstance(body.forwarded_props, dict) else {}
    return await _run(
        body, request, tenant, runtime, runs, streams, blueprints, props.get("agent_name")
    )


@router.post(
    "/{agent_name}",
    summary="AG-UI for one agent blueprint: RunAgentInput in, AG-UI events out (SSE)",
    response_class=Response,
    responses={**_DOC, **problem_responses(401, 404, 409, 422)},
)
async def run_ag_ui_agent(
    agent_name: str,
    raw: AgUiInput,
    request: Request,
    tenant: TenantDep,
    runtime: RuntimeDep,
    runs: RunsDep,
    streams: RunStreamsDep,
    blueprints: BlueprintsDep,
) -> Response:
    """Like `POST /v1/ag-ui`, with the new thread's session running blueprint `agent_name`:
    one URL per agent, as CopilotKit's runtime configures its agents."""
    body = run_agent_input(raw)
    return await _run(body, request, tenant, runtime, runs, streams, blueprints, agent_name)


async def _run(
    body: RunAgentInput,
    request: Request,
    tenant: Principal,
    runtime: SessionRuntime,
    runs: RunManager,
    streams: RunStreams,
    blueprints: Blueprints,
    agent_name: Any,
) -> Response:
    session_id = session_id_of(body.thread_id)
    token = run_token(body.thread_id, body.run_id)
    found = await runtime.find_idempotent(tenant.tenant_id, token)
    snapshot: list[Message] | None = None
    shared: dict[str, Any] | None = None
    if found is None:
        try:
            run, snapshot, shared = await _start(
                body, tenant.tenant_id, session_id, runtime, runs, blueprints, agent_name, token
            )
        except (IdempotentReplay, StaleSession, AgentSessionError) as exc:
            # A duplicate of this runId committed meanwhile: stream that run instead.
            found = await runtime.find_idempotent(tenant.tenant_id, token)
            if found is None and isinstance(exc, StaleSession):
                # Its input was written by another request, under another runId.
                raise Conflict("the thread changed while this run started") from None
            if found is None:
                raise
    if found is None:
        # Follow before anything awaits, so no delta of the run is missed.
        follow = streams.follow(tenant.tenant_id, run, deltas=True)
    else:
        # A replay: its deltas are left out: the turn in progress may have sent some
        # already, and a text message must not start half-way (the turn's text comes whole
        # with its MODEL_RESPONSE instead).
        run = await runs.get_run(tenant.tenant_id, found.result["run_id"])
        follow = streams.follow(tenant.tenant_id, run, deltas=False)
    if shared is None:
        shared = await _state_at_start(runtime, tenant.tenant_id, run)
    # ag_ui declares `accept: str = None`: None, its own default, is what it takes for none.
    encoder = EventEncoder(accept=request.headers.get("accept"))  # type: ignore[arg-type]
    translator = Translator(thread_id=body.thread_id, run_id=body.run_id)
    frames = _frames(follow, translator, encoder, snapshot=snapshot, shared=shared)
    return StreamResponse(
        frames,
        slot=None,
        stop=follow.stop,
        settings=streams.settings,
        cleanup=follow.close,
        media_type=encoder.get_content_type(),
    )


async def _start(
    body: RunAgentInput,
    tenant_id: str,
    session_id: str,
    runtime: SessionRuntime,
    runs: RunManager,
    blueprints: Blueprints,
    agent_name: Any,
    token: IdempotencyToken,
) -> tuple[RunRecord, list[Message] | None, dict[str, Any]]:
    """Reconcile the history and the shared state and start the run, in one transaction
    (see the module doc).

    Returns the run; when the client's history lags behind the session's, the conversation
    as of the run's start for a MESSAGES_SNAPSHOT; and the shared state the run starts from.
    """
    client_state = _given_state(body)
    loaded = await _session(runtime, tenant_id, session_id, blueprints, agent_name)
    max_inline = runtime.limits.max_inline_bytes
    decisions = _decisions(body)
    # With decisions to write, a new user message is appended, not the run's input: a run
    # may not start on new input while approvals wait (they are decided in its prefix).
    as_input = not decisions
    first = reconcile(body.messages, loaded.state, max_inline_bytes=max_inline, as_input=as_input)
    props = body.forwarded_props if isinstance(body.forwarded_props, dict) else {}
    approval = props.get("approval_required") or []
    if not isinstance(approval, list) or not all(isinstance(n, str) for n in approval):
        raise InvalidRequest("forwardedProps.approval_required must be a list of tool names")
    request = RunRequest(
        input=first.input,
        input_id=first.input_id,
        client_tools=[
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in body.tools or []
        ],
        approval_required=approval,
    )

    at_start: list[list[dict[str, Any]]] = []
    shared: list[dict[str, Any]] = []

    def prefix(current: Loaded) -> list[NewEvent]:
        # Decided again on the session as the start's transaction sees it.
        history = reconcile(
            body.messages, current.state, max_inline_bytes=max_inline, as_input=as_input
        )
        at_start[:] = []
        if lags_behind(body.messages, current.state, history):
            # Memory as the run starts from it (the last call of this is what commits).
            answers = [tool_output_item(a["call_id"], a["output"]) for a in history.answers]
            given = [] if first.input is None else [_input_item(first.input, first.input_id)]
            at_start.append([*current.state.items, *history.items, *answers, *given])
        if history.input_id != first.input_id:
            # The input was written meanwhile: decided again on the current state (under the
            # session's hold, a duplicate of this runId that committed it is streamed).
            raise StaleSession(session_id)
        events: list[NewEvent] = []
        if history.items:
            events.append(ev.MemoryItemsAppended(items=history.items).event())
        if history.answers:
            events += answer_events(current, history.answers, replace=False)
        for call_id, (decision, reason) in decisions.items():
            events += approval_events(current, call_id=call_id, decision=decision, reason=reason)
        waiting = [
            cid
            for cid, c in current.state.pending.items()
            if c.get("kind") in ("client", "approval")
            and c.get("decision") is None
            and cid not in decisions
            and cid not in {a["call_id"] for a in history.answers}
        ]
        if waiting:
            # A run cannot continue past unanswered calls or undecided approvals.
            raise ToolCallsPending(waiting)
        if not events and request.input is None and not current.state.items:
            raise NothingPending("the thread has no message to run on")
        stored = current.state.shared_state
        if client_state is not None:
            events += set_events(stored, client_state, limit=runtime.limits.max_state_bytes)
        shared[:] = [stored if client_state is None else client_state]
        return events

    run = await runs.start(tenant_id, session_id, request, idempotency=token, prefix=prefix)
    return run, (snapshot_messages(at_start[0]) if at_start else None), shared[0]


def _given_state(body: RunAgentInput) -> dict[str, Any] | None:
    """The client's `state` to store, or None to keep the stored one: an empty state is
    what a page without one (or just reloaded) sends, and must not wipe the thread's."""
    state = body.state
    if state is None or state == {}:
        return None
    if not isinstance(state, dict):
        raise InvalidRequest("state must be a JSON object (the session's shared state)")
    return state


async def _state_at_start(
    runtime: SessionRuntime, tenant_id: str, run: RunRecord
) -> dict[str, Any]:
    """The shared state a run (started by an earlier request) started from: the fold up to
    its first event of its own, past the events its start wrote before them (its prefix)."""
    if run.first_seq is None:  # queued: it starts from the state as it will be
        return (await runtime.load(tenant_id, run.session_id)).state.shared_state
    before = await runtime.state_at(tenant_id, run.session_id, run.first_seq - 1)
    events = await runtime.list_events(
        tenant_id, run.session_id, after_seq=run.first_seq - 1, until_seq=run.last_seq, limit=100
    )
    prefix: list[Event] = []
    for event in events:
        if event.run_id == run.run_id:
            break
        prefix.append(event)
    return fold(before, prefix).shared_state


def _input_item(content: Any, message_id: str | None) -> dict[str, Any]:
    item = {"type": "message", "role": "user", "content": content}
    return item if message_id is None else {**item, "id": message_id}


def _decisions(body: RunAgentInput) -> dict[str, tuple[str, str | None]]:
    """`resume` entries as approval decisions by call id (an interrupt id is the call id)."""
    out: dict[str, tuple[str, str | None]] = {}
    for entry in body.resume or []:
        payload = entry.payload if isinstance(entry.payload, dict) else {}
        approved = entry.status == "resolved" and payload.get("approved", True) is not False
        reason = payload.get("reason") if isinstance(payload.get("reason"), str) else None
        out[entry.interrupt_id] = ("approve" if approved else "reject", reason)
    return out


async def _session(
    runtime: SessionRuntime,
    tenant_id: str,
    session_id: str,
    blueprints: Blueprints,
    agent_name: Any,
) -> Loaded:
    """The thread's session, created on first use (a concurrent creation is fine)."""
    try:
        return await runtime.load(tenant_id, session_id)
    except SessionNotFound:
        pass
    if agent_name is not None and not isinstance(agent_name, str):
        raise InvalidRequest("forwardedProps.agent_name must be a string")
    agent = blueprints.spec(agent_name) if agent_name else AgentSpec()
    try:
        return await runtime.create(
            tenant_id,
            session_id=session_id,
            metadata={"ag_ui": True},
            agent=agent.model_dump(),
            binding={},
        )
    except SessionAlreadyExists:
        return await runtime.load(tenant_id, session_id)


async def _frames(
    follow: RunFollow,
    translator: Translator,
    encoder: EventEncoder,
    *,
    snapshot: list[Message] | None,
    shared: dict[str, Any],
) -> AsyncIterator[bytes]:
    """The run as AG-UI frames: the run's timeline (`RunFollow`: its events from the table,
    then live from the bus on whichever replica it runs, with its deltas), translated, until
    its RUN_FINISHED. A stream the server has to end (shutdown, a client too far behind)
    ends with RUN_ERROR: the client may run the thread again."""

    def encode(events: list[BaseEvent]) -> bytes:
        return "".join(encoder.encode(e) for e in events).encode()

    yield encode(translator.start(follow.run.run_id, follow.run.session_id))
    if snapshot is not None:
        yield encode([MessagesSnapshotEvent(messages=snapshot)])
    yield encode([state_snapshot_event(shared)])
    items = follow.items
    try:
        async for item in items:
            if isinstance(item, StreamEnd):
                why = {
                    "shutdown": "the server is shutting down",
                    "overflow": "this client fell too far behind",
                }.get(item.reason, item.reason)
                yield encode(translator.cut(why))
                return
            out: list[BaseEvent] = []
            for entry in item:
                if isinstance(entry, Ephemeral):
                    out += translator.delta(entry.frame)
                else:
                    out += translator.event(entry.event)
            if out:
                yield encode(out)
        if not translator.finished:
            yield encode(translator.cut("the run ended without RUN_FINISHED"))
    finally:
        await items.aclose()
