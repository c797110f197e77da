"""The loop controller: run model turns and tools, then continue or stop with a reason.

One user request is one run; one run may be several turns. After each turn the controller
either continues (tool results to answer, or an auto-continue with a hidden instruction that
never enters memory) or stops with a `StopReason`. Each turn writes its events in a few
fenced transactions: the request (STEP_START, MODEL_REQUEST), the response with its memory
items and TOOL_CALLs (committed before any tool runs, so a crash never re-executes a tool),
then the tool results and the decision.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from app.runtime.errors import AgentSessionError
from app.runtime.memory.calibration import key_of, prompt_estimate, ratio_of
from app.runtime.memory.compaction import (
    CompactionFailed,
    CompactionPolicy,
    ScriptedSummarizer,
    Summarizer,
    compact,
    compacted_memory,
    plan_auto_compaction,
)
from app.runtime.memory.context import projection
from app.runtime.memory.items import estimate_tokens
from app.runtime.models.base import (
    CONTINUATION_INSTRUCTION,
    ModelClient,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    ToolSpec,
)
from app.runtime.models.failures import ModelContextTooLong, ProviderError
from app.runtime.ports import AppendResult
from app.runtime.session import event_payloads as ev
from app.runtime.session.events import NewEvent
from app.runtime.session.state import SessionState
from app.runtime.tools.registry import Tool, ToolContext, ToolError, ToolRegistry


class StopReason(StrEnum):
    COMPLETED = "COMPLETED"
    NEEDS_USER_INPUT = "NEEDS_USER_INPUT"
    BLOCKED_BY_APPROVAL = "BLOCKED_BY_APPROVAL"
    BLOCKED_BY_TOOL_ERROR = "BLOCKED_BY_TOOL_ERROR"
    MAX_AUTO_FOLLOWUPS_REACHED = "MAX_AUTO_FOLLOWUPS_REACHED"
    MAX_TOTAL_TURNS_REACHED = "MAX_TOTAL_TURNS_REACHED"
    # A budget other than turns (tool calls, wall time, tokens); the payload names which.
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    INTERRUPTED = "INTERRUPTED"
    # The provider failed for good (rate limit past the retries, auth, a refusal): the run
    # fails, and AUTO_STOP's `reason` carries the failure's code.
    PROVIDER_ERROR = "PROVIDER_ERROR"
    # Any other failure (a model error that is no provider's, such as the scripted `[fail]`,
    # or an unexpected one): the run fails, and AUTO_STOP's `reason` carries the code.
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Everything a run needs to know, resolved from the agent spec and the request."""

    model: str | None
    instructions: str | None
    server_tools: list[Tool]
    client_tools: list[ToolSpec]
    approval_required: frozenset[str]
    max_total_turns: int
    max_auto_followups: int
    max_tool_calls: int
    max_wall_seconds: float
    max_tokens: int | None
    on_tool_error: str  # "stop" | "feed_back"
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)
    summarizer: Summarizer | None = None
    context_budget: int | None = None  # max input tokens minus reserved output tokens
    profile: str | None = None  # the model profile (the key of the token calibration)

    def tool_specs(self) -> list[ToolSpec]:
        return [t.spec for t in self.server_tools] + list(self.client_tools)


@dataclass(slots=True)
class Outcome:
    """How the loop ended; the caller writes it with the last events."""

    status: str  # finished | failed
    stop_reason: str | None
    output: str | None = None
    error: dict[str, Any] | None = None
    events: list[NewEvent] = field(default_factory=list)


Write = Callable[[list[NewEvent], dict[str, Any]], Awaitable[AppendResult]]
LoadState = Callable[[], Awaitable[SessionState]]
Publish = Callable[[dict[str, Any]], None]
EndTurn = Callable[[str], Awaitable[None]]


def shared_state_instruction(shared: dict[str, Any]) -> str:
    """The shared state as the model sees it: after the instructions, compact, and only once
    something set it (a session without one sends exactly the prompt it always did)."""
    text = json.dumps(shared, separators=(",", ":"), ensure_ascii=False)
    return (
        "Shared state (a JSON object the user's app shows and edits; change it with the "
        f"update_state tool when asked): {text}"
    )


def _zero() -> dict[str, int]:
    return {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}


class LoopController:
    """Drives one run. `write` is fenced by the run's epoch; `load` gives current memory."""

    def __init__(
        self,
        *,
        run_id: str,
        options: RunOptions,
        model: ModelClient,
        tools: ToolRegistry,
        write: Write,
        load: LoadState,
        publish: Publish,
        context: ToolContext | None = None,
        end_turn: EndTurn | None = None,
    ) -> None:
        self.run_id = run_id
        self.context = context
        self.opts = options
        self.model = model
        self.tools = tools
        self.write = write
        self.load = load
        self.publish = publish
        self.end_turn = end_turn
        self.usage = _zero()
        self.turns = 0
        self.tool_calls = 0
        self.followups = 0
        self.started = time.monotonic()
        # The request the latest response answered (a context retry sends another one).
        self._last_request: ModelRequest | None = None

    def _progress(self) -> dict[str, Any]:
        return {"turns": self.turns, "usage": dict(self.usage)}

    async def run(self) -> Outcome:
        # The state settling read, when it wrote nothing, is the first turn's state too.
        unchanged = await self._settle_decided_calls()
        continuation: str | None = None
        while True:
            budget = self._budget_exceeded()
            if budget is not None:
                return budget
            self.turns += 1
            turn_id = f"{self.run_id}.t{self.turns}"
            state = await self._compacted_state(turn_id, unchanged)
            unchanged = None
            items, report = self._project(state)
            request = ModelRequest(
                model=self.opts.model or "",
                instructions=self._instructions(state),
                items=items,
                tools=self.opts.tool_specs(),
                continuation=continuation,
                continuation_count=self.followups,
                # Without a summary (nor calibration), the projection's estimate is exactly
                # the items' one.
                items_tokens=report.tokens_after if self._plain(state) else None,
            )
            opening = [
                ev.StepStart(turn=self.turns).event(run_id=self.run_id, turn_id=turn_id),
                ev.ModelRequest(
                    model=request.model,
                    items=len(request.items),
                    estimated_tokens=report.tokens_after,
                    budget=self.opts.context_budget,
                    tools=[t.name for t in request.tools],
                    continuation=continuation is not None,
                ).event(run_id=self.run_id, turn_id=turn_id),
            ]
            if report.items_dropped:
                # The prompt was shaped; memory was not: a projection report, not a compaction.
                opening.append(report.event(run_id=self.run_id, turn_id=turn_id))
            await self.write(opening, self._progress())
            try:
                response = await self._complete(request, turn_id)
            except AgentSessionError as exc:
                return self._failed(exc, turn_id)
            finally:
                # The turn's text is final: its deltas reach every replica before its events.
                if self.end_turn is not None:
                    await self.end_turn(turn_id)
            self._count_usage(response, request)
            continuation = None
            outcome = await self._after_response(response, turn_id)
            if outcome is not None:
                return outcome
            if response.needs_continuation and not response.tool_calls:
                if self.followups >= self.opts.max_auto_followups:
                    return self._stop(StopReason.MAX_AUTO_FOLLOWUPS_REACHED, turn_id, response.text)
                self.followups += 1
                continuation = CONTINUATION_INSTRUCTION
                await self.write(
                    [
                        ev.StepEnd(turn=self.turns).event(run_id=self.run_id, turn_id=turn_id),
                        ev.AutoContinue(followup=self.followups, instruction=continuation).event(
                            run_id=self.run_id, turn_id=turn_id
                        ),
                    ],
                    self._progress(),
                )

    async def _complete(self, request: ModelRequest, turn_id: str) -> ModelResponse:
        """The model's answer; a context-length refusal compacts memory and retries once.

        The retry sends the compacted memory, projected again; when compaction cannot
        remove anything the refusal stands (the same prompt would be refused again).
        """
        self._last_request = request
        try:
            return await self.model.complete(request, self._delta(turn_id))
        except ModelContextTooLong:
            state = await self._compact_for_context(turn_id)
            if state is None:
                raise
        items, report = self._project(state)
        retry = replace(
            request,
            instructions=self._instructions(state),
            items=items,
            items_tokens=report.tokens_after if self._plain(state) else None,
        )
        self._last_request = retry
        return await self.model.complete(retry, self._delta(turn_id))

    @property
    def calibration_key(self) -> str:
        return key_of(self.opts.profile, self.opts.model)

    def _project(self, state: SessionState) -> tuple[list[dict[str, Any]], ev.ProjectionReport]:
        """Memory fitted to the budget, estimated with what this model's counts taught."""
        ratio = ratio_of(state.calibration, self.calibration_key)
        return projection(state.items, state.summary, self.opts.context_budget, ratio)

    def _plain(self, state: SessionState) -> bool:
        """The projection's estimate is the plain heuristic of the items alone."""
        return state.summary is None and self.calibration_key not in state.calibration

    async def _compact_for_context(self, turn_id: str) -> SessionState | None:
        """Compact memory now (the policy's strategy; truncation if a summary fails), or
        None when nothing could be removed."""
        state = await self.load()
        policy = self.opts.compaction
        summarizer = self.opts.summarizer or ScriptedSummarizer()
        try:
            done = await compact(state, policy, summarizer, trigger="context_length")
        except CompactionFailed:
            done = await compact(
                state, policy, summarizer, strategy="truncate", trigger="context_length"
            )
        if done.result["items_removed"] == 0:
            return None
        event = compacted_memory(done).event(run_id=self.run_id, turn_id=turn_id)
        await self.write([event], self._progress())
        return await self.load()

    async def _compacted_state(
        self, turn_id: str, current: SessionState | None = None
    ) -> SessionState:
        """Memory before a turn (`current`, or read now), after automatic compaction if the
        policy calls for it."""
        state = current if current is not None else await self.load()
        if self.opts.summarizer is None:
            return state
        planned = await plan_auto_compaction(state, self.opts.compaction, self.opts.summarizer)
        if not planned:
            return state
        await self.write(
            [p.event(run_id=self.run_id, turn_id=turn_id) for p in planned], self._progress()
        )
        return await self.load()

    def _instructions(self, state: SessionState) -> str | None:
        parts = [p for p in (self.opts.instructions, state.summary) if p]
        if state.summary:
            parts[-1] = f"Summary of the earlier conversation: {state.summary}"
        if state.shared_state:
            parts.append(shared_state_instruction(state.shared_state))
        return "\n\n".join(parts) or None

    def _delta(self, turn_id: str) -> Callable[[dict[str, Any]], None]:
        def on_delta(frame: dict[str, Any]) -> None:
            self.publish({**frame, "run_id": self.run_id, "turn_id": turn_id})

        return on_delta

    def _calibration(self, response: ModelResponse) -> ev.Calibration | None:
        """What this response teaches the token estimate (only a provider's own count)."""
        reported = int(response.usage.get("input_tokens") or 0)
        if not response.usage_reported or reported <= 0 or self._last_request is None:
            return None
        return {
            "key": self.calibration_key,
            "estimated_tokens": prompt_estimate(self._last_request),
            "input_tokens": reported,
        }

    def _count_usage(self, response: ModelResponse, request: ModelRequest) -> None:
        usage = response.usage or {}
        if not usage:  # no provider figure: estimate
            prompt = estimate_tokens(request.items)
            output = len(response.text) // 4 + 1
            usage = {
                "input_tokens": prompt,
                "output_tokens": output,
                "total_tokens": prompt + output,
            }
            response.usage = usage
        for key in self.usage:
            self.usage[key] += int(usage.get(key, 0))

    def _budget_exceeded(self) -> Outcome | None:
        turn_id = f"{self.run_id}.t{self.turns}"
        if self.turns >= self.opts.max_total_turns:
            return self._stop(StopReason.MAX_TOTAL_TURNS_REACHED, turn_id)
        if time.monotonic() - self.started > self.opts.max_wall_seconds:
            return self._stop(StopReason.BUDGET_EXCEEDED, turn_id, budget="wall_time")
        if self.opts.max_tokens is not None and self.usage["total_tokens"] >= self.opts.max_tokens:
            return self._stop(StopReason.BUDGET_EXCEEDED, turn_id, budget="tokens")
        if self.tool_calls > self.opts.max_tool_calls:
            return self._stop(StopReason.BUDGET_EXCEEDED, turn_id, budget="tool_calls")
        return None

    async def _after_response(self, response: ModelResponse, turn_id: str) -> Outcome | None:
        """Record the response and run its tools; an Outcome when the run must stop here."""
        items: list[dict[str, Any]] = []
        if response.text:
            items.append({"type": "message", "role": "assistant", "content": response.text})
        kinds: dict[str, ev.CallKind] = {}
        for call in response.tool_calls:
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                }
            )
            kinds[call.call_id] = self._kind(call.name)
        events = [
            ev.ModelResponse(
                text=response.text,
                tool_calls=[_call_ref(c) for c in response.tool_calls],
                usage=response.usage,
                finish_reason=response.finish_reason,
                calibration=self._calibration(response),
            ).event(run_id=self.run_id, turn_id=turn_id)
        ]
        if items:
            events.append(
                ev.MemoryItemsAppended(items=items).event(run_id=self.run_id, turn_id=turn_id)
            )
        for call in response.tool_calls:
            tool_call = ev.ToolCall(
                call_id=call.call_id,
                name=call.name,
                arguments=call.arguments,
                kind=kinds[call.call_id],
                run_id=self.run_id,
            )
            events.append(tool_call.event(run_id=self.run_id, turn_id=turn_id))
            if tool_call.kind == "approval":
                approval = ev.ApprovalRequested.of(tool_call)
                events.append(approval.event(run_id=self.run_id, turn_id=turn_id))
        if not response.tool_calls and not response.needs_continuation:
            reason = (
                StopReason.NEEDS_USER_INPUT
                if response.text.rstrip().endswith("?")
                else StopReason.COMPLETED
            )
            # The run ends with this response: the response and the run's end are one write
            # (one commit fewer per run), in the same order as ever.
            return self._stop(reason, turn_id, response.text, extra=events)
        await self.write(events, self._progress())
        if not response.tool_calls:
            return None
        self.tool_calls += len(response.tool_calls)
        results, failed = await self._run_server_tools(response, kinds, turn_id)
        pending = [c for c in response.tool_calls if kinds[c.call_id] != "server"]
        if failed and self.opts.on_tool_error == "stop":
            return self._stop(StopReason.BLOCKED_BY_TOOL_ERROR, turn_id, extra=results)
        if any(kinds[c.call_id] == "client" for c in pending):
            return self._stop(StopReason.NEEDS_USER_INPUT, turn_id, extra=results, pending=pending)
        if pending:
            return self._stop(
                StopReason.BLOCKED_BY_APPROVAL, turn_id, extra=results, pending=pending
            )
        await self.write(
            [*results, ev.StepEnd(turn=self.turns).event(run_id=self.run_id, turn_id=turn_id)],
            self._progress(),
        )
        return None

    def _kind(self, name: str) -> ev.CallKind:
        if any(t.name == name for t in self.opts.client_tools):
            return "client"
        if name in self.opts.approval_required:
            return "approval"
        return "server"

    async def _run_server_tools(
        self, response: ModelResponse, kinds: Mapping[str, str], turn_id: str
    ) -> tuple[list[NewEvent], bool]:
        results: list[NewEvent] = []
        failed = False
        for call in response.tool_calls:
            if kinds[call.call_id] != "server":
                continue
            output, is_error = await self._execute(call.name, call.arguments, call.call_id)
            tool = next((t for t in self.opts.server_tools if t.name == call.name), None)
            failed = failed or (is_error and not (tool is not None and tool.feeds_back_errors))
            results.append(self._result(call.call_id, output, is_error, turn_id))
        return results, failed

    async def _execute(self, name: str, arguments: str, call_id: str) -> tuple[str, bool]:
        tool = next((t for t in self.opts.server_tools if t.name == name), None)
        if tool is None:
            return f"error: no tool named {name!r} is available", True
        context = replace(self.context, call_id=call_id) if self.context is not None else None
        try:
            return await self.tools.execute(tool, arguments, context), False
        except ToolError as exc:
            return f"error: {exc}", True

    def _result(self, call_id: str, output: str, is_error: bool, turn_id: str | None) -> NewEvent:
        result = ev.ToolResult.answering(call_id, output, is_error=is_error)
        return result.event(run_id=self.run_id, turn_id=turn_id)

    async def _settle_decided_calls(self) -> SessionState | None:
        """Before the first turn: run approved calls, answer rejected ones. Returns the state
        it read when it wrote nothing (else None: the writes changed it)."""
        state = await self.load()
        events: list[NewEvent] = []
        for call_id, call in state.pending.items():
            decision = call.get("decision")
            if call.get("kind") != "approval" or decision is None:
                continue
            if decision == "approve":
                output, is_error = await self._execute(
                    call["name"], call.get("arguments", "{}"), call_id
                )
            else:
                reason = call.get("reason") or "no reason given"
                output, is_error = f"rejected by the user: {reason}", False
            events.append(self._result(call_id, output, is_error, None))
        if not events:
            return state
        await self.write(events, self._progress())
        return None

    def _stop(
        self,
        reason: StopReason,
        turn_id: str,
        output: str | None = None,
        *,
        extra: list[NewEvent] | None = None,
        pending: list[Any] | None = None,
        budget: str | None = None,
    ) -> Outcome:
        ids = {"run_id": self.run_id, "turn_id": turn_id}
        events = list(extra or [])
        events.append(ev.StepEnd(turn=self.turns).event(**ids))
        if reason == StopReason.COMPLETED:
            events.append(ev.FinalOutput(text=output or "").event(**ids))
        stop = ev.AutoStop(
            stop_reason=str(reason),
            pending=[_call_ref(c) for c in pending] if pending else None,
            budget=budget or None,
        )
        events.append(stop.event(**ids))
        finished = ev.RunFinished(
            status="finished", stop_reason=str(reason), usage=dict(self.usage), turns=self.turns
        )
        events.append(finished.event(**ids))
        return Outcome(status="finished", stop_reason=str(reason), output=output, events=events)

    def _failed(self, exc: AgentSessionError, turn_id: str) -> Outcome:
        """The run fails with `exc`, and stops like every other run: AUTO_STOP (PROVIDER_ERROR
        for a provider's failure, FAILED for any other, with the failure's code as `reason`)
        then RUN_FINISHED, so a stream or a timeline always sees why and where a run ended.
        The run's own stop reason stays PROVIDER_ERROR or none: `failed` says the rest."""
        error = ev.Error(code=exc.code, detail=exc.detail)
        stop = StopReason.PROVIDER_ERROR if isinstance(exc, ProviderError) else None
        finished = ev.RunFinished(
            status="failed",
            stop_reason=str(stop) if stop else None,
            usage=dict(self.usage),
            turns=self.turns,
        )
        ids = {"run_id": self.run_id, "turn_id": turn_id}
        events = [error.event(**ids), ev.StepEnd(turn=self.turns).event(**ids)]
        stopped = ev.AutoStop(stop_reason=str(stop or StopReason.FAILED), reason=exc.code)
        events.append(stopped.event(**ids))
        events.append(finished.event(**ids))
        return Outcome(
            status="failed",
            stop_reason=str(stop) if stop else None,
            error=error.to_payload(),
            events=events,
        )


def _call_ref(call: ToolCallRequest) -> ev.CallRef:
    """A model's tool call as the events name it."""
    return {"call_id": call.call_id, "name": call.name, "arguments": call.arguments}
