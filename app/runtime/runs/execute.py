"""Executing a run in this process: the loop, the writes it decides, and the state it
carries from one write to the next so that it never re-reads what it just wrote.

Model calls and tools are raced against the run's `interrupted` event (a cancel from any
replica, or a lost lease): they stop at once. Database writes are never cut halfway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from app.runtime.errors import AgentSessionError, RunFenced
from app.runtime.memory.compact import auto_compact
from app.runtime.models.base import ModelClient, ModelError
from app.runtime.observer import Observer
from app.runtime.ports import AppendResult, RunFinish, RunRecord, SessionRecord
from app.runtime.runs.agent import agent_spec
from app.runtime.runs.delta_tick import DeltaTick
from app.runtime.runs.lease import Lease
from app.runtime.runs.loop import LoopController, Outcome, RunOptions, StopReason
from app.runtime.runs.plan import RunPlanner
from app.runtime.session import event_payloads as ev
from app.runtime.session.events import Event, NewEvent
from app.runtime.session.projector import fold
from app.runtime.session.redaction import Redactor
from app.runtime.session.service import Loaded, SessionRuntime
from app.runtime.session.state import SessionState
from app.runtime.tools.registry import ToolContext, ToolRegistry
from app.tracing import span

log = logging.getLogger("app.runs")
T = TypeVar("T")


@dataclass
class LiveRun:
    """A run executing in this process."""

    run: RunRecord
    task: asyncio.Task[None] | None = None
    interrupted: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    ended: RunRecord | None = None  # the run row as the finishing write committed it
    # The session's state as of the run's newest write, carried from write to write so that
    # the loop never re-reads what it just wrote; None when unknown (then it is read).
    state: SessionState | None = None
    session: SessionRecord | None = None  # the session row as the newest write left it
    # The events the start committed (first_seq .. the run's last_seq then), for a stream
    # of the run opened at once: it sends them without reading them back.
    first_events: tuple[Event, ...] = ()


class RunExecutor:
    def __init__(
        self,
        runtime: SessionRuntime,
        planner: RunPlanner,
        lease: Lease,
        *,
        redactor: Redactor,
        delta_tick_seconds: float = 0.05,
    ) -> None:
        self.runtime = runtime
        self.planner = planner
        self.lease = lease
        self.redactor = redactor
        self.delta_tick_seconds = delta_tick_seconds

    async def execute(
        self,
        run: RunRecord,
        options: RunOptions,
        queued_events: list[NewEvent] | None,
        live: LiveRun,
        agent: dict[str, Any],
    ) -> None:
        """Run the loop to its end. `agent` is the session's spec as the start just read it;
        a queued run reads it again once it has its turn, since it may wait a long time."""
        heartbeat = self.lease.heartbeat(run, live.interrupted)
        started = time.monotonic()
        observer = self.runtime.observer
        try:
            if queued_events is not None:
                claimed = await self.lease.claim_turn(run, queued_events, live.interrupted)
                if claimed is None:
                    return
                run = claimed
                agent = (await self.runtime.get(run.tenant_id, run.session_id)).agent
            spec = agent_spec(agent)  # once per run: model, its kind, the summarizer
            deltas = DeltaTick(
                lambda frame: self._publish(run, live, frame), interval=self.delta_tick_seconds
            )
            controller = LoopController(
                run_id=run.run_id,
                options=options,
                model=_Interruptible(
                    self.planner.model_for(spec),
                    live.interrupted,
                    provider=self.planner.provider_kind(spec),
                    observer=observer,
                ),
                tools=_InterruptibleTools(self.planner.tools, live.interrupted),
                write=lambda events, progress: self._write(run, live, events, progress),
                load=lambda: self._state(run, live),
                publish=deltas.add,
                context=ToolContext(run.tenant_id, run.session_id, run.run_id),
                end_turn=lambda turn_id: self._end_turn(run, deltas, turn_id),
            )
            outcome = await controller.run()
            await self._finish(run, live, outcome, controller)
            observer.run_finished(
                stop_reason=str(outcome.stop_reason or outcome.status.upper()),
                seconds=time.monotonic() - started,
            )
            carried = None
            if live.state is not None and live.session is not None:
                carried = Loaded(session=live.session, state=live.state.copy())
            await auto_compact(
                self.runtime,
                run.tenant_id,
                run.session_id,
                self.planner.summarizer(spec),
                loaded=carried,
            )
        except RunFenced:
            pass  # taken over: whoever fenced the run writes its end
        except Exception as exc:  # a bug or an unexpected failure: the run fails, visibly
            log.exception("run %s failed unexpectedly", run.run_id)
            await self._fail(run, live, exc)
            observer.run_finished(stop_reason="FAILED", seconds=time.monotonic() - started)
        finally:
            await heartbeat.stop()
            live.done.set()

    async def _finish(
        self, run: RunRecord, live: LiveRun, outcome: Outcome, controller: LoopController
    ) -> None:
        result = await self._write(
            run,
            live,
            outcome.events,
            {"turns": controller.turns, "usage": dict(controller.usage)},
            finish=RunFinish(outcome.status, outcome.stop_reason, outcome.output, outcome.error),
        )
        live.ended = result.run

    async def _fail(self, run: RunRecord, live: LiveRun, exc: Exception) -> None:
        problem = {"code": "internal_error", "detail": "the run failed unexpectedly"}
        if isinstance(exc, AgentSessionError):
            problem = {"code": exc.code, "detail": exc.detail}
        stop = ev.AutoStop(stop_reason=str(StopReason.FAILED), reason=problem["code"])
        events = [
            ev.Error(**problem).event(run_id=run.run_id),
            stop.event(run_id=run.run_id),
            ev.RunFinished(status="failed", stop_reason=None).event(run_id=run.run_id),
        ]
        with contextlib.suppress(RunFenced):
            await self._write(
                run, live, events, None, finish=RunFinish("failed", None, None, problem)
            )

    async def _write(
        self,
        run: RunRecord,
        live: LiveRun,
        events: list[NewEvent],
        progress: dict[str, Any] | None,
        finish: RunFinish | None = None,
    ) -> AppendResult:
        result = await self.runtime.append_run_events(
            run.tenant_id,
            run.run_id,
            session_id=run.session_id,
            epoch=run.epoch,
            events=events,
            lease_until=self.lease.until(),
            progress=progress,
            finish=finish,
        )
        self.carry(live, result, live.state)
        return result

    def carry(self, live: LiveRun, result: AppendResult, state: SessionState | None) -> None:
        """Fold what a write of this run committed into the state it carries (and into the
        runtime's cache), if the write followed that state directly; otherwise forget it.

        A gap between the carried seq and the write's first seq means someone else appended
        in between: the state is read again when next needed.
        """
        live.session = result.session
        if state is None or not result.events or result.events[0].seq != state.seq + 1:
            live.state = None if result.events else state
            return
        live.state = fold(state, result.events)
        self.runtime.remember(result.session, live.state)

    async def _state(self, run: RunRecord, live: LiveRun) -> SessionState:
        if live.state is not None:
            return live.state.copy()
        loaded = await self.runtime.load(run.tenant_id, run.session_id)
        live.state, live.session = loaded.state.copy(), loaded.session
        return loaded.state

    async def _end_turn(self, run: RunRecord, deltas: DeltaTick, turn_id: str) -> None:
        deltas.flush()
        await self.runtime.live.end_turn(
            run.tenant_id, run.session_id, run_id=run.run_id, turn_id=turn_id
        )

    def _publish(self, run: RunRecord, live: LiveRun, frame: dict[str, Any]) -> None:
        # Deltas are never stored, but they reach people: they pass the same redaction,
        # once per tick's text. (A secret split across two ticks is not caught here; the
        # stored answer is.) The model's text is the one field not the run's own.
        text = frame.get("text")
        if isinstance(text, str):
            frame["text"] = self.redactor.text(text)
        else:
            frame = self.redactor.value(frame)
        # After the run's last write (the turn's STEP_START) on every replica's timeline.
        after_seq = live.session.last_seq if live.session is not None else None
        self.runtime.live.publish_ephemeral(
            run.tenant_id, run.session_id, frame, after_seq=after_seq
        )


class _Interruptible:
    """A model client whose call ends at once when the run is interrupted, and whose calls
    are reported to the observer (latency, tokens, outcome; an interrupted call is not)."""

    def __init__(
        self, inner: ModelClient, interrupted: asyncio.Event, *, provider: str, observer: Observer
    ) -> None:
        self.inner = inner
        self.interrupted = interrupted
        self.provider = provider
        self.observer = observer

    async def complete(self, request: Any, on_delta: Any) -> Any:
        started = time.monotonic()
        try:
            with span("model.call", provider=self.provider):
                response = await race(self.inner.complete(request, on_delta), self.interrupted)
        except ModelError:
            self.observer.model_call(
                provider=self.provider, seconds=time.monotonic() - started, ok=False
            )
            raise
        usage = response.usage or {}
        self.observer.model_call(
            provider=self.provider,
            seconds=time.monotonic() - started,
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
        )
        return response


class _InterruptibleTools(ToolRegistry):
    def __init__(self, inner: ToolRegistry, interrupted: asyncio.Event) -> None:
        self.inner = inner
        self.interrupted = interrupted

    def get(self, name: str) -> Any:
        return self.inner.get(name)

    async def execute(
        self, tool: Any, raw_arguments: str, context: ToolContext | None = None
    ) -> str:
        with span("tool.execute", tool=tool.name):
            return await race(self.inner.execute(tool, raw_arguments, context), self.interrupted)


async def race(coro: Coroutine[Any, Any, T], interrupted: asyncio.Event) -> T:
    """Await `coro` unless `interrupted` fires first (then cancel it and raise RunFenced).

    Only model calls and tools are raced: database writes are never cancelled halfway.
    """
    if interrupted.is_set():
        coro.close()
        raise RunFenced("the run was interrupted")
    work = asyncio.ensure_future(coro)
    stop = asyncio.ensure_future(interrupted.wait())
    done, _ = await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
    if work in done:
        stop.cancel()
        return work.result()
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await work
    raise RunFenced("the run was interrupted")
