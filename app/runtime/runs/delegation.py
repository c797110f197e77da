"""Delegation: a session hands a subtask to a child session and gets its final output back.

The child is a session of its own (its own ledger, memory and runs) in the caller's tree:
`parent_session_id` is the caller, `root_session_id` the caller's root, its binding the
caller's (it works in the same workspace), its agent spec the caller's unless the request
gives one. It runs through the `RunManager` like any run, and the caller waits for it.

Depth is the length of the parent chain (forks count too, so forking a deep child does not
escape the limit); a child deeper than `max_depth` is refused, so a model that keeps
delegating to itself stops at the limit instead of filling the service.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from app.runtime.errors import AgentSessionError, DelegationTooDeep, InvalidRequest
from app.runtime.ports import IdempotencyToken, RunRecord, SessionRecord
from app.runtime.runs.agent import AgentSpec
from app.runtime.runs.manager import RunManager
from app.runtime.runs.plan import RunRequest
from app.runtime.session.service import SessionRuntime
from app.runtime.tools.registry import Tool, ToolContext, ToolError


@dataclass(frozen=True, slots=True)
class DelegationRequest:
    """What the caller hands over: the child's input, and optionally its own agent spec."""

    input: Any
    agent: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Delegated:
    """The child session and its (ended, or still running after the wait) run."""

    session: SessionRecord
    run: RunRecord


class Delegator:
    """Creates and runs child sessions. `attach` gives it the run manager once that exists
    (the manager's tool registry holds this delegator's tool, so neither can come first)."""

    def __init__(
        self, runtime: SessionRuntime, *, max_depth: int = 3, wait_seconds: float = 300.0
    ) -> None:
        self.runtime = runtime
        self.max_depth = max_depth
        self.wait_seconds = wait_seconds
        self._runs: RunManager | None = None

    def attach(self, runs: RunManager) -> None:
        self._runs = runs

    @property
    def runs(self) -> RunManager:
        if self._runs is None:
            raise RuntimeError("the delegator has no run manager attached")
        return self._runs

    async def depth(self, tenant_id: str, session: SessionRecord) -> int:
        """How many parents `session` has (0 for a root), counted up to max_depth + 1."""
        depth, current = 0, session
        while current.parent_session_id is not None and depth <= self.max_depth:
            depth += 1
            parent = await self.runtime.find(tenant_id, current.parent_session_id)
            if parent is None:
                break  # an erased parent ends the chain we can see
            current = parent
        return depth

    async def delegate(
        self,
        tenant_id: str,
        session_id: str,
        request: DelegationRequest,
        *,
        call_id: str | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> Delegated:
        """Create the child session, run it (mode wait), and return it with its run.

        `idempotency` guards the child's run start (a crash before it leaves an empty
        child); `finish` answers a replay of it.

        Raises:
            SessionNotFound, DelegationTooDeep, InvalidRequest (a bad agent spec, or a
            model profile that does not exist or is not configured).
        """
        caller = await self.runtime.get(tenant_id, session_id)
        depth = await self.depth(tenant_id, caller) + 1
        if depth > self.max_depth:
            raise DelegationTooDeep(depth, self.max_depth)
        agent = caller.agent if request.agent is None else _agent(request.agent)
        # Before the child exists: a profile that cannot serve its run would leave it empty.
        self.runs.models.check(AgentSpec.model_validate(agent or {}).provider)
        metadata = {**request.metadata, "delegated_from": session_id}
        if call_id is not None:
            metadata["delegated_call_id"] = call_id
        child = await self.runtime.create(
            tenant_id,
            session_id=None,
            metadata=metadata,
            agent=agent,
            binding=caller.binding,
            parent=caller,
        )
        child_id = child.session.session_id
        run = await self.runs.start(
            tenant_id, child_id, RunRequest(input=request.input), idempotency=idempotency
        )
        return await self.finish(run)

    async def finish(self, run: RunRecord) -> Delegated:
        """Wait for a child's run (cancelling it past the wait), and return it with its
        session."""
        tenant_id, child_id = run.tenant_id, run.session_id
        try:
            done = await self.runs.wait(tenant_id, run.run_id, within_seconds=self.wait_seconds)
        except asyncio.CancelledError:
            # The caller gave up (its run was interrupted, or the tool timed out): the child
            # must not go on working for nobody.
            with contextlib.suppress(Exception):
                await asyncio.shield(self.runs.cancel(tenant_id, child_id, run.run_id))
            raise
        if done.status in ("queued", "running"):
            await self.runs.cancel(tenant_id, child_id, run.run_id)
            done = await self.runs.wait(tenant_id, run.run_id, within_seconds=5)
        return Delegated(session=await self.runtime.get(tenant_id, child_id), run=done)

    async def explain(self, run: RunRecord) -> str:
        """Why a child's run did not complete, in words the calling model can act on."""
        why = run.output or (run.error or {}).get("detail")
        if why is None:
            # Stopped by a tool error: the child's last tool output says which.
            state = (await self.runtime.load(run.tenant_id, run.session_id)).state
            outputs = [i for i in state.items if i.get("type") == "function_call_output"]
            why = str(outputs[-1].get("output")) if outputs else "no output"
        return (
            f"the delegated session {run.session_id} ended {run.status}"
            f" ({run.stop_reason or 'no stop reason'}): {why}"
        )


def _agent(raw: dict[str, Any]) -> dict[str, Any]:
    try:
        return AgentSpec.model_validate(raw).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidRequest(f"the child's agent spec is invalid: {where}: {first['msg']}") from exc


DELEGATE = "delegate"


def delegate_tool(delegator: Delegator, *, timeout_seconds: float) -> Tool:
    """The `delegate` server tool: run a subtask in a child session, answer with its output."""

    async def handler(args: dict[str, Any], context: ToolContext) -> str:
        request = DelegationRequest(input=args["input"], agent=args.get("agent"))
        try:
            result = await delegator.delegate(
                context.tenant_id, context.session_id, request, call_id=context.call_id
            )
        except AgentSessionError as exc:
            raise ToolError(f"{exc.code}: {exc.detail}") from exc
        run = result.run
        if run.status == "finished" and run.stop_reason == "COMPLETED":
            return run.output or ""
        raise ToolError(await delegator.explain(run))

    return Tool(
        DELEGATE,
        "Hand a subtask to a new child session (its own memory and timeline) and answer with "
        "its final output. Optional `agent` is the child's agent spec (default: yours).",
        {
            "type": "object",
            "properties": {"input": {"type": "string"}, "agent": {"type": "object"}},
            "required": ["input"],
            "additionalProperties": False,
        },
        handler,
        timeout_seconds=timeout_seconds,
        needs_context=True,
    )
