"""`POST /v1/ag-ui/connect` and `POST /v1/ag-ui/stop`: re-attach to a thread, stop its run.

A page that reloads, a second tab, or a CopilotKit runtime restarted (its `AgentRunner`'s
`connect`) asks for the thread without starting a run. The stream is an AG-UI run of its
own, in the protocol's order:

- RUN_STARTED (the active run's id, else a minted one), MESSAGES_SNAPSHOT (memory as of the
  session's head, converted as `history.snapshot_messages` does, without the calls still
  pending) and STATE_SNAPSHOT (`_state_snapshot`);
- what is pending, as the run stream emitted it: TOOL_CALL_START/ARGS/END of each call that
  waits for a frontend's output or an approval;
- with a run active (on whichever replica): its events after the snapshot's seq, live, with
  its text deltas (the bus's catch-up gives the turn in progress from its start), until its
  RUN_FINISHED; with none: RUN_FINISHED at once, its outcome `interrupt` for approvals that
  wait, else `success` with the pending frontend calls' ids.

Frames carry SSE ids: the seq of the ledger event they come from, and for text deltas
`seq:chars` (the characters of the open text message already sent). A client that loses the
stream reconnects with `Last-Event-ID` and gets the rest, each event once, with neither
RUN_STARTED nor the snapshots again.

The stop is the run service's cancel (a fence, then the interrupt reaches the replica that
executes the run), so it works from any replica.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Annotated, Any

from ag_ui.core import (
    BaseEvent,
    MessagesSnapshotEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from fastapi import APIRouter, Header, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.ag_ui.history import MINTED_PREFIX, snapshot_messages
from app.api.ag_ui.routes import run_token, session_id_of
from app.api.ag_ui.stream import Translator, approval_interrupt, state_snapshot_event
from app.api.http.deps import RunsDep, RunStreamsDep, RuntimeDep, TenantDep
from app.api.http.problems import problem_responses
from app.live.run_follow import RunFollow
from app.live.stream_response import StreamResponse, StreamStop
from app.live.timeline import StreamEnd
from app.runtime.errors import InvalidCursor, RunNotFound
from app.runtime.ports import RunRecord
from app.runtime.runs.manager import RunManager
from app.runtime.session.events import Event, EventType
from app.runtime.session.service import Loaded, SessionRuntime
from app.runtime.session.subscription import Ephemeral

router = APIRouter(prefix="/v1/ag-ui", tags=["ag-ui"])

_CURSOR = re.compile(r"^(\d{1,18})(?::(\d{1,12}))?$")
_SSE = "text/event-stream"


class AgUiConnectInput(BaseModel):
    """What connect reads of a `RunAgentInput` (CopilotKit's runtime sends a whole one):
    the thread. The rest is accepted and ignored: connect starts nothing."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    thread_id: str = Field(alias="threadId", min_length=1, max_length=1024)


class AgUiStopInput(BaseModel):
    """The thread whose active run to stop; with `runId`, only if that is the active run."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    thread_id: str = Field(alias="threadId", min_length=1, max_length=1024)
    run_id: str | None = Field(default=None, alias="runId", min_length=1, max_length=1024)


class AgUiStopResult(BaseModel):
    """Whether a run was stopped; `asrRunId` names it (the service's run id)."""

    model_config = ConfigDict(populate_by_name=True)

    stopped: bool
    thread_id: str = Field(alias="threadId")
    asr_run_id: str | None = Field(default=None, alias="asrRunId")
    status: str | None = None


LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        max_length=64,
        description="Resume a connect stream after this frame id (`seq` or `seq:chars`).",
    ),
]
_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "AG-UI events as Server-Sent Events, each with an `id:` to resume from",
        "content": {_SSE: {"schema": {"type": "object"}}},
    }
}


def _state_snapshot(loaded: Loaded) -> StateSnapshotEvent:
    """The thread's shared state (the session's, folded from its ledger) as AG-UI's
    STATE_SNAPSHOT, built as a run's stream builds it."""
    return state_snapshot_event(loaded.state.shared_state)


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a resumed connect stream picks up: after ledger seq `seq`, with `chars`
    characters of the then open text message already sent (None: no message open)."""

    seq: int
    chars: int | None


def parse_cursor(raw: str | None) -> Cursor | None:
    text = (raw or "").strip()
    if not text:
        return None
    match = _CURSOR.match(text)
    if match is None:
        raise InvalidCursor(f"Last-Event-ID {text[:40]!r} is not a frame id of this stream")
    chars = match.group(2)
    return Cursor(int(match.group(1)), None if chars is None else int(chars))


class JoinTranslator(Translator):
    """The translation of a run joined after its start: turns whose text memory holds are
    not streamed again, and a resumed stream continues the text message it left open."""

    def __init__(
        self,
        *,
        thread_id: str,
        run_id: str,
        done_turns: set[str],
        open_chars: int | None = None,
    ) -> None:
        super().__init__(thread_id=thread_id, run_id=run_id)
        self.done_turns = done_turns
        self.chars = 0  # characters of the open text message sent (by this or a prior stream)
        self._skip = open_chars or 0  # characters a prior stream already sent
        self._resumed_open = open_chars is not None

    def delta(self, frame: dict[str, Any]) -> list[BaseEvent]:
        turn_id = frame.get("turn_id")
        if turn_id in self.done_turns:
            return []
        if frame.get("type") != "reasoning_delta" and self._resumed_open:
            text = frame.get("text") or ""
            cut = min(self._skip, len(text))
            self._skip -= cut
            text = text[cut:]
            if self.text is None:  # the client has the message open already: no START
                self.text = f"{MINTED_PREFIX}msg_{turn_id or self.run_id}"
                self.streamed.add(self.text)
                self.chars = cut
            else:
                self.chars += cut
            if not text:
                return []
            frame = {**frame, "text": text}
        out = super().delta(frame)
        self.chars += sum(len(e.delta) for e in out if isinstance(e, TextMessageContentEvent))
        return out

    def event(self, event: Event) -> list[BaseEvent]:
        if (
            event.type == EventType.MODEL_RESPONSE
            and self._resumed_open
            and self.text is None
            and event.turn_id not in self.done_turns
        ):
            # The turn's deltas never came again: its remaining text, whole.
            self._resumed_open = False
            parent = f"{MINTED_PREFIX}msg_{event.turn_id or self.run_id}"
            text = (event.payload.get("text") or "")[self._skip :]
            self.streamed.add(parent)
            rest: list[BaseEvent] = []
            if text:
                rest.append(TextMessageContentEvent(message_id=parent, delta=text))
            rest.append(TextMessageEndEvent(message_id=parent))
            payload = {**event.payload, "text": ""}
            return [*rest, *super().event(replace(event, payload=payload))]
        out = super().event(event)
        if event.type == EventType.MODEL_RESPONSE:
            self._resumed_open = False
            self.chars = 0
        return out


def _sse(event: BaseEvent, frame_id: str | None) -> str:
    data = event.model_dump_json(by_alias=True, exclude_none=True)
    head = f"id: {frame_id}\n" if frame_id is not None else ""
    return f"{head}data: {data}\n\n"


@router.post(
    "/connect",
    summary="AG-UI connect: a thread's snapshots, what waits, and its active run, live (SSE)",
    response_class=Response,
    responses={**_DOC, **problem_responses(401, 404, 422)},
)
async def connect_ag_ui(
    body: AgUiConnectInput,
    tenant: TenantDep,
    runtime: RuntimeDep,
    runs: RunsDep,
    streams: RunStreamsDep,
    last_event_id: LastEventId = None,
) -> Response:
    """Re-attach to a thread without starting a run: MESSAGES_SNAPSHOT and STATE_SNAPSHOT,
    the tool calls and approvals that wait, then the thread's active run (on any replica)
    live until its RUN_FINISHED. Resume a cut stream with `Last-Event-ID`. An unknown thread
    is a 404."""
    cursor = parse_cursor(last_event_id)
    session_id = session_id_of(body.thread_id)
    tenant_id = tenant.tenant_id
    loaded = await runtime.load(tenant_id, session_id)  # SessionNotFound: 404
    head = loaded.session.last_seq
    if cursor is not None and cursor.seq > head:
        raise InvalidCursor(f"Last-Event-ID {cursor.seq} is beyond the thread's last event")
    run = await _run_to_follow(runtime, runs, tenant_id, loaded, cursor)
    after = head if cursor is None else cursor.seq
    follow = None
    done: set[str] = set()
    if run is not None:
        # Subscribed before anything awaits: no event after `after` is missed.
        follow = streams.follow(tenant_id, run, deltas=True, after=after)
        try:
            done = await _done_turns(runtime, tenant_id, run, after)
        except BaseException:
            follow.close()
            raise
    run_id = run.run_id if run is not None else f"{MINTED_PREFIX}connect_{head}"
    translator = JoinTranslator(
        thread_id=body.thread_id,
        run_id=run_id,
        done_turns=done,
        open_chars=None if cursor is None else cursor.chars,
    )
    frames = _frames(loaded, follow, translator, cursor)
    return StreamResponse(
        frames,
        slot=None,
        stop=follow.stop if follow is not None else StreamStop(),
        settings=streams.settings,
        cleanup=follow.close if follow is not None else None,
        media_type=_SSE,
    )


async def _run_to_follow(
    runtime: SessionRuntime,
    runs: RunManager,
    tenant_id: str,
    loaded: Loaded,
    cursor: Cursor | None,
) -> RunRecord | None:
    """The run whose events come after the snapshot: the active one; for a resumed stream,
    the run of the first event after its cursor (it may have finished meanwhile)."""
    if cursor is not None:
        after = await runtime.list_events(
            tenant_id, loaded.session.session_id, after_seq=cursor.seq, limit=1
        )
        if after and after[0].run_id:
            try:
                return await runs.get_run(tenant_id, after[0].run_id)
            except RunNotFound:
                return None
    if loaded.session.active_run_id is None:
        return None
    try:
        return await runs.get_run(tenant_id, loaded.session.active_run_id)
    except RunNotFound:
        return None


async def _done_turns(
    runtime: SessionRuntime, tenant_id: str, run: RunRecord, upto: int
) -> set[str]:
    """The run's turns whose MODEL_RESPONSE is at or before `upto`: memory (the snapshot)
    or the client (a resumed stream) has their text, which the bus's catch-up of the turn
    in progress might hold still."""
    if run.first_seq is None or run.first_seq > upto:
        return set()
    events = await runtime.list_events(
        tenant_id,
        run.session_id,
        after_seq=run.first_seq - 1,
        until_seq=upto,
        types=[EventType.MODEL_RESPONSE],
        run_id=run.run_id,
    )
    return {e.turn_id for e in events if e.turn_id}


async def _frames(
    loaded: Loaded,
    follow: RunFollow | None,
    translator: JoinTranslator,
    cursor: Cursor | None,
) -> AsyncIterator[bytes]:
    head = loaded.session.last_seq
    last = str(head if cursor is None else cursor.seq)
    state = loaded.state
    if cursor is None:
        pending = {cid: c for cid, c in state.pending.items() if c.get("decision") is None}
        first: list[BaseEvent] = [
            RunStartedEvent(
                thread_id=translator.thread_id,
                run_id=translator.run_id,
                metadata={"asr_session_id": loaded.session.session_id, "asr_connect": True},
            ),
            MessagesSnapshotEvent(
                messages=snapshot_messages(_without_calls(state.items, set(pending)))
            ),
            _state_snapshot(loaded),
            *_pending_calls(state.items, pending),
        ]
        if follow is None:
            first.append(_finished(translator, pending))
        yield "".join(_sse(e, last) for e in first).encode()
    if follow is None:
        return
    items = follow.items
    try:
        async for item in items:
            if isinstance(item, StreamEnd):
                why = {
                    "shutdown": "the server is shutting down",
                    "overflow": "this client fell too far behind",
                }.get(item.reason, item.reason)
                # No id: the client resumes from the last frame it got.
                yield _sse(translator.cut(why)[0], None).encode()
                return
            out: list[str] = []
            for entry in item:
                if isinstance(entry, Ephemeral):
                    out += _delta_frames(translator, translator.delta(entry.frame), last)
                else:
                    last = str(entry.event.seq)
                    out += [_sse(e, last) for e in translator.event(entry.event)]
            if out:
                yield "".join(out).encode()
        if not translator.finished:
            yield _sse(translator.cut("the run ended without RUN_FINISHED")[0], None).encode()
    finally:
        await items.aclose()


def _delta_frames(translator: JoinTranslator, events: list[BaseEvent], last: str) -> list[str]:
    """Delta frames, each with the id to resume after it: the text sent so far of the
    open message counted up to and including the frame."""
    if translator.text is None:
        return [_sse(e, last) for e in events]
    contents = [e for e in events if isinstance(e, TextMessageContentEvent)]
    sent = translator.chars - sum(len(e.delta) for e in contents)
    out = []
    for e in events:
        if isinstance(e, TextMessageContentEvent):
            sent += len(e.delta)
        out.append(_sse(e, f"{last}:{sent}"))
    return out


def _without_calls(items: list[dict[str, Any]], call_ids: set[str]) -> list[dict[str, Any]]:
    return [i for i in items if not (i.get("type") == "function_call" and i["call_id"] in call_ids)]


def _pending_calls(
    items: list[dict[str, Any]], pending: dict[str, dict[str, Any]]
) -> list[BaseEvent]:
    """The waiting calls as the run stream emitted them (TOOL_CALL_START/ARGS/END), after
    the snapshot's messages, each under the assistant message it belongs to."""
    out: list[BaseEvent] = []
    snapshot = snapshot_messages(items)
    parents: dict[str, str] = {}
    for message in snapshot:
        for call in getattr(message, "tool_calls", None) or []:
            parents[call.id] = message.id
    for call_id, call in pending.items():
        arguments = call.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        out.append(
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=call.get("name", ""),
                parent_message_id=parents.get(call_id),
            )
        )
        if arguments:
            out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=arguments))
        out.append(ToolCallEndEvent(tool_call_id=call_id))
    return out


def _finished(translator: JoinTranslator, pending: dict[str, dict[str, Any]]) -> RunFinishedEvent:
    """No run is active: the thread's standing, as the run that left it ended it."""
    for call_id, call in pending.items():
        if call.get("kind") == "approval":
            interrupt = approval_interrupt(call_id, call.get("name", ""), call.get("arguments"))
            translator.interrupts.append(interrupt)
    outcome: Any
    if translator.interrupts:
        outcome = RunFinishedInterruptOutcome(interrupts=translator.interrupts)
    else:
        client = [cid for cid, c in pending.items() if c.get("kind") == "client"]
        outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=client or None)
    return RunFinishedEvent(
        thread_id=translator.thread_id, run_id=translator.run_id, outcome=outcome
    )


@router.post(
    "/stop",
    summary="AG-UI stop: interrupt a thread's active run, wherever it executes",
    response_model=AgUiStopResult,
    response_model_by_alias=True,
    responses=problem_responses(401, 404, 422),
)
async def stop_ag_ui(
    body: AgUiStopInput, tenant: TenantDep, runtime: RuntimeDep, runs: RunsDep
) -> AgUiStopResult:
    """Stop the thread's active run (it ends `cancelled`, its streams end with RUN_FINISHED
    outcome `cancelled`). With `runId` (the AG-UI run id it was started with), only that
    run. `stopped: false` when no run, or not that run, is active. An unknown thread is a
    404."""
    session_id = session_id_of(body.thread_id)
    tenant_id = tenant.tenant_id
    session = await runtime.get(tenant_id, session_id)  # SessionNotFound: 404
    active = session.active_run_id
    if active is not None and body.run_id is not None:
        found = await runtime.find_idempotent(tenant_id, run_token(body.thread_id, body.run_id))
        if found is None or found.result.get("run_id") != active:
            active = None
    if active is None:
        return AgUiStopResult(stopped=False, threadId=body.thread_id)
    run = await runs.cancel(tenant_id, session_id, active)
    return AgUiStopResult(
        stopped=run.stop_reason == "INTERRUPTED" or run.status == "interrupted",
        threadId=body.thread_id,
        asrRunId=run.run_id,
        status=run.status,
    )
