"""One MCP `tools/call` as one run, in wait mode, through the same run service as
`POST /v1/sessions/{id}/runs`:

- without `session_id` a new session is created with the tool's agent spec; with it, that
  session of the caller's tenant continues (the model sees the earlier turns);
- the run starts with the call's key (`keys.py`) as its idempotency key, recorded in the
  start's own transaction: a retried call finds that run and waits for it, wherever it runs;
- while it works, its timeline (`RunFollow`: its events, then live from the bus, on
  whichever replica executes it) becomes `notifications/progress` for a caller that asked;
- a call the client abandons (its stream closed, or `notifications/cancelled`) cancels the
  run, which ends INTERRUPTED;
- a run that stops for an approval is answered with the pending calls and the session id
  (`approvals.py` asks the client instead when it can).

Domain errors (an unknown session, a session busy with another run, a rate limit) are the
tool's errors (`isError`), as MCP wants errors a model can read; nothing is a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import types

from app.live.run_follow import RunStreams
from app.live.timeline import StreamEnd
from app.runtime.errors import AgentSessionError, IdempotentReplay, SessionAlreadyExists
from app.runtime.ports import IdempotencyToken, RunRecord
from app.runtime.runs.agent import AgentSpec
from app.runtime.runs.answers import Prefix
from app.runtime.runs.manager import LIVE_STATUSES, RunManager
from app.runtime.runs.plan import RunRequest
from app.runtime.session.service import SessionRuntime

log = logging.getLogger("app")

# A run that sends nothing for this long still reports progress now and then: the client
# sees the call alive, and proxies keep the stream open.
HEARTBEAT_SECONDS = 2.0

Progress = Callable[[float, str | None], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class CallServices:
    runtime: SessionRuntime
    runs: RunManager
    streams: RunStreams
    wait_seconds: float


@dataclass(frozen=True, slots=True)
class Call:
    tenant_id: str
    tool: str
    agent: AgentSpec
    input: str
    session_id: str | None
    token: IdempotencyToken
    new_session_id: str


class CallFailed(Exception):
    """The call cannot run; the message is the tool error the caller reads."""


async def find_run(
    services: CallServices, tenant_id: str, token: IdempotencyToken
) -> RunRecord | None:
    """The run a call with this key started, if one did."""
    found = await services.runtime.find_idempotent(tenant_id, token)
    if found is None or "run_id" not in found.result:
        return None
    return await services.runs.get_run(tenant_id, found.result["run_id"])


async def start_or_find(
    services: CallServices, call: Call, *, prefix: Prefix | None = None
) -> RunRecord:
    """Start the call's run, or find the one its key already started."""
    try:
        found = await find_run(services, call.tenant_id, call.token)
        if found is not None:
            return found
        session_id = call.session_id or await _new_session(services.runtime, call)
        request = RunRequest(input=call.input if prefix is None else None)
        try:
            return await services.runs.start(
                call.tenant_id, session_id, request, idempotency=call.token, prefix=prefix
            )
        except IdempotentReplay:
            # A duplicate of this call committed meanwhile: that run is the call's.
            found = await find_run(services, call.tenant_id, call.token)
            if found is None:
                raise
            return found
    except AgentSessionError as exc:
        raise CallFailed(_reason(exc)) from None


async def _new_session(runtime: SessionRuntime, call: Call) -> str:
    try:
        await runtime.create(
            call.tenant_id,
            session_id=call.new_session_id,
            metadata={"mcp": True, "tool": call.tool},
            agent=call.agent.model_dump(),
            binding={},
        )
    except SessionAlreadyExists:
        pass  # a retry whose first attempt created it
    return call.new_session_id


async def follow_to_end(
    services: CallServices, tenant_id: str, run: RunRecord, progress: Progress | None
) -> RunRecord:
    """Wait for the run to end, reporting progress from its timeline; cancelled (the client
    abandoned the call), cancel the run."""
    try:
        deadline = time.monotonic() + services.wait_seconds
        if progress is not None:
            await _report(services.streams, tenant_id, run, progress, deadline=deadline)
        left = max(deadline - time.monotonic(), 0.01)
        done = await services.runs.wait(tenant_id, run.run_id, within_seconds=left)
    except BaseException:
        # Cancelled, or the stream failed: a call nobody waits for must not keep running.
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await services.runs.cancel(tenant_id, run.session_id, run.run_id)
        raise
    return done


async def _report(
    streams: RunStreams, tenant_id: str, run: RunRecord, progress: Progress, *, deadline: float
) -> None:
    """Progress from the run's timeline until its RUN_FINISHED (or the wait's `deadline`):
    one step per batch of its events and text, and a heartbeat while it is silent."""
    follow = streams.follow(tenant_id, run, deltas=True)
    items = follow.items
    step = 0
    try:
        pending: asyncio.Task[Any] | None = None
        while time.monotonic() < deadline:
            if pending is None:
                pending = asyncio.ensure_future(anext(items))
            done, _ = await asyncio.wait({pending}, timeout=HEARTBEAT_SECONDS)
            step += 1
            if not done:
                await progress(step, "working")
                continue
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            finally:
                if done:
                    pending = None
            if isinstance(item, StreamEnd):
                return
            await progress(step, _describe(item))
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        await items.aclose()
        follow.close()


def _describe(batch: list[Any]) -> str:
    """A short human line for a batch of the run's timeline."""
    for entry in reversed(batch):
        event = getattr(entry, "event", None)
        if event is not None:
            return str(event.type).lower().replace("_", " ")
    return "writing"


def result_of(run: RunRecord, pending: list[dict[str, Any]]) -> types.CallToolResult:
    """The run as the tool's result: its output as text, the ids as structured content."""
    structured: dict[str, Any] = {
        "session_id": run.session_id,
        "run_id": run.run_id,
        "status": run.status,
        "stop_reason": run.stop_reason,
    }
    if pending:
        structured["approval_pending"] = pending
        names = ", ".join(f"{p['name']} ({p['call_id']})" for p in pending)
        text = (
            f"Approval pending: {names} waits for an approval in session {run.session_id}. "
            f"Approve or reject it (POST /v1/sessions/{run.session_id}/approvals), then call "
            f"again with session_id {run.session_id!r}."
        )
        return _result(text, structured, error=False)
    if run.status == "failed":
        return _result(f"The run failed: {run.error or 'unknown error'}", structured, error=True)
    if run.status == "interrupted":
        return _result("The run was interrupted.", structured, error=True)
    if run.status in LIVE_STATUSES:
        text = f"The run is still {run.status}; call again with the same request to wait on."
        return _result(text, structured, error=False)
    return _result(run.output or "", structured, error=False)


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


def _result(text: str, structured: dict[str, Any], *, error: bool) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=error,
    )


def _reason(exc: AgentSessionError) -> str:
    code = getattr(exc, "code", type(exc).__name__)
    return f"{code}: {exc}"


async def pending_approvals(runtime: SessionRuntime, run: RunRecord) -> list[dict[str, Any]]:
    """The approvals `run` stopped for, still undecided."""
    if run.stop_reason != "BLOCKED_BY_APPROVAL":
        return []
    state = (await runtime.load(run.tenant_id, run.session_id)).state
    return [
        {"call_id": cid, "name": c.get("name"), "arguments": c.get("arguments")}
        for cid, c in state.pending.items()
        if c.get("run_id") == run.run_id
        and c.get("kind") == "approval"
        and c.get("decision") is None
    ]
