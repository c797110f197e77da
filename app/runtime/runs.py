"""`RunManager`: starts runs, keeps their leases, cancels them, and sweeps dead ones.

Ownership is a lease with an epoch (DESIGN §9). The owner renews the lease while it works;
every write it makes is fenced by the epoch. Cancel, interrupt and the sweeper all use one
takeover: bump the epoch and mark the run interrupted (`fence_run`), then write the closing
events and free the session (`close_fenced_run`). A tool call that may have started in a
dead run is answered "interrupted", never executed again (at most once).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from app.logs import task_context
from app.runtime import event_payloads as ev
from app.runtime.agent import AgentSpec
from app.runtime.compact import auto_compact
from app.runtime.compaction import ModelSummarizer, ScriptedSummarizer, Summarizer
from app.runtime.context import budget_of
from app.runtime.errors import (
    AgentSessionError,
    NothingPending,
    RunAlreadyActive,
    RunFenced,
    RunNotFound,
    SeqConflict,
    StaleSession,
    ToolCallsPending,
    TooManyRequests,
)
from app.runtime.events import NewEvent
from app.runtime.loop import LoopController, Outcome, RunOptions, StopReason
from app.runtime.models.base import ModelClient, ModelError, ModelRequest, OnDelta, ToolSpec
from app.runtime.models.registry import ModelRegistry
from app.runtime.observer import Observer
from app.runtime.ports import (
    AppendResult,
    IdempotencyToken,
    RunFinish,
    RunRecord,
    SessionRecord,
)
from app.runtime.projector import fold
from app.runtime.redaction import Redactor
from app.runtime.service import Loaded, SessionRuntime
from app.runtime.state import SessionState
from app.runtime.tools import ToolContext, ToolRegistry
from app.tracing import span

log = logging.getLogger("app.runs")
T = TypeVar("T")

# A run in one of these has not ended yet.
LIVE_STATUSES = ("queued", "running")
# How often a wait for a run of another process looks at its row.
_WAIT_POLL_SECONDS = 0.2

# Events decided on a session as read (`Loaded`), to be written only if it is still that.
Prefix = Callable[["Loaded"], list[NewEvent]]
# How often a replica deletes expired Idempotency-Keys (any replica may; it is idempotent).
_KEY_SWEEP_SECONDS = 600.0
# Fresh reads a start with a prefix tries before it gives up on a busy session (409).
_FRESH_TRIES = 3

INTERRUPTED_OUTPUT = "error: interrupted — the run stopped before this tool call finished"


class RunStorePort(Protocol):
    def run_values(self, tenant_id: str, session_id: str, **kw: Any) -> dict[str, Any]: ...
    async def start_run(
        self, tenant_id: str, session_id: str, **kw: Any
    ) -> tuple[RunRecord, AppendResult]: ...
    async def enqueue_run(self, tenant_id: str, session_id: str, **kw: Any) -> RunRecord: ...
    async def claim_run(
        self, tenant_id: str, run_id: str, **kw: Any
    ) -> tuple[RunRecord, AppendResult]: ...
    async def append_run_events(self, tenant_id: str, run_id: str, **kw: Any) -> AppendResult: ...
    async def renew_lease(self, tenant_id: str, run_id: str, **kw: Any) -> bool: ...
    async def fence_run(self, tenant_id: str, run_id: str, **kw: Any) -> RunRecord | None: ...
    async def close_fenced_run(
        self, tenant_id: str, run_id: str, **kw: Any
    ) -> AppendResult | None: ...
    async def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None: ...
    async def list_runs(
        self, tenant_id: str, session_id: str, *, limit: int = 100
    ) -> list[RunRecord]: ...
    async def list_stale_runs(self, *, limit: int = 100) -> list[RunRecord]: ...
    async def delete_expired_idempotency_keys(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What a caller asks of a run (HTTP schemas map onto this)."""

    input: Any | None = None
    multitask: str = "reject"  # reject | enqueue | interrupt
    client_tools: list[dict[str, Any]] = field(default_factory=list)
    approval_required: list[str] = field(default_factory=list)
    limits: dict[str, Any] = field(default_factory=dict)
    on_tool_error: str | None = None
    # The client's id for the input message (AG-UI), stored on its memory item.
    input_id: str | None = None


@dataclass
class _Live:
    """A run executing in this process."""

    run: RunRecord
    task: asyncio.Task[None] | None = None
    interrupted: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    listeners: list[asyncio.Queue[tuple[str, Any]]] = field(default_factory=list)
    ended: RunRecord | None = None  # the run row as the finishing write committed it
    # The session's state as of the run's newest write, carried from write to write so that
    # the loop never re-reads what it just wrote; None when unknown (then it is read).
    state: SessionState | None = None
    session: SessionRecord | None = None  # the session row as the newest write left it


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class RunManager:
    def __init__(
        self,
        runtime: SessionRuntime,
        store: RunStorePort,
        *,
        models: ModelRegistry | dict[str, ModelClient],
        tools: ToolRegistry,
        owner: str | None = None,
        lease_seconds: float = 30.0,
        sweep_seconds: float = 5.0,
        queue_poll_seconds: float = 0.1,
        shutdown_event: asyncio.Event | None = None,
        redactor: Redactor | None = None,
        max_live_runs_per_tenant: int = 32,
        max_runs_per_minute: int = 600,
    ) -> None:
        self.redactor = redactor or Redactor()
        self.max_live_runs = max_live_runs_per_tenant
        self.max_runs_per_minute = max_runs_per_minute
        self._recent: dict[str, collections.deque[float]] = {}
        self.runtime = runtime
        # Set when the process starts shutting down: run streams send a final `shutdown`
        # frame and end, so the server's drain is not held open by them.
        self.shutdown_event = shutdown_event or asyncio.Event()
        self.store = store
        # A plain mapping of clients (tests, embedders) serves each as a profile of its name.
        self.models = (
            models if isinstance(models, ModelRegistry) else ModelRegistry.of_clients(models)
        )
        self.tools = tools
        self.owner = owner or default_owner()
        self.lease = timedelta(seconds=lease_seconds)
        self.sweep_seconds = sweep_seconds
        self.queue_poll_seconds = queue_poll_seconds
        self._live: dict[str, _Live] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    # ------------------------------------------------------------------ starting

    async def start(
        self,
        tenant_id: str,
        session_id: str,
        request: RunRequest,
        *,
        idempotency: IdempotencyToken | None = None,
        prefix: Prefix | None = None,
    ) -> RunRecord:
        """Create the run and start it in the background; returns its first record.

        `idempotency` is recorded in the start's transaction. `prefix(loaded)` gives events
        to write before the run's own, in the same transaction, decided on the session as
        `loaded` has it (answers to pending tool calls that the run then continues from): the
        start is then conditional on the session still being that version.

        Raises:
            SessionNotFound, RunAlreadyActive (multitask "reject"), ToolCallsPending,
            NothingPending (from `prefix`), IdempotentReplay, SeqConflict (`prefix` and the
            session kept changing).
        """
        self._check_rate(tenant_id)
        # The cached view of the session, when this process has one, spares a read: the
        # start is then conditional on the session still being that version (StaleSession
        # otherwise, and the start is redone on a fresh read).
        loaded = self.runtime.cached(tenant_id, session_id)
        created = None
        if loaded is not None and request.multitask == "reject":
            try:
                created = await self._create(
                    tenant_id, session_id, request, loaded, idempotency, prefix, expected=True
                )
            except (StaleSession, ToolCallsPending, NothingPending):
                pass  # the cached view may be behind: decide on a fresh read
        for _ in range(_FRESH_TRIES if created is None else 0):
            loaded = await self.runtime.load(tenant_id, session_id)
            try:
                created = await self._create(
                    tenant_id,
                    session_id,
                    request,
                    loaded,
                    idempotency,
                    prefix,
                    expected=prefix is not None,
                )
                break
            except StaleSession:
                continue  # written to since our read (only with a prefix): read again
        if created is None:
            raise SeqConflict(-1, -1)
        record, started, options, start_events = created
        queued = started is None
        self._recent[tenant_id].append(time.monotonic())
        live = _Live(run=record)
        if started is not None:
            self._carry(live, started, loaded.state)
        self._live[record.run_id] = live
        live.task = asyncio.create_task(
            self._execute(
                record, options, start_events if queued else None, live, loaded.session.agent
            ),
            name=f"run:{record.run_id}",
            # The run's log lines name it (and its session), not the request that started it.
            context=task_context(tenant_id=tenant_id, session_id=session_id, run_id=record.run_id),
        )
        return record

    async def _create(
        self,
        tenant_id: str,
        session_id: str,
        request: RunRequest,
        loaded: Loaded,
        idempotency: IdempotencyToken | None,
        prefix: Prefix | None,
        *,
        expected: bool,
    ) -> tuple[RunRecord, AppendResult | None, RunOptions, list[NewEvent]]:
        """Check the request against the session as `loaded` has it, then create the run
        (only if the session is still that version, with `expected`)."""
        options = self.resolve_options(loaded.session.agent, request)
        if request.input is not None:
            waiting = [
                cid
                for cid, c in loaded.state.pending.items()
                if c.get("kind") in ("client", "approval") and c.get("decision") is None
            ]
            if waiting:
                raise ToolCallsPending(waiting)
        if request.multitask == "interrupt" and loaded.session.active_run_id:
            await self.cancel(tenant_id, session_id, loaded.session.active_run_id)
        run_id = f"run_{uuid.uuid4().hex}"
        start_events = self._start_events(run_id, request, options)
        if prefix is not None:
            start_events = prefix(loaded) + start_events
        values = self.store.run_values(
            tenant_id,
            session_id,
            run_id=run_id,
            input=request.input,
            options=_options_json(request),
            owner=self.owner,
            lease_until=self._lease_until(),
            idempotency=idempotency,
        )
        if request.multitask == "enqueue":
            record = await self.store.enqueue_run(
                tenant_id,
                session_id,
                values=values,
                max_live_runs=self.max_live_runs,
                idempotency=idempotency,
            )
            return record, None, options, start_events
        record, started = await self.store.start_run(
            tenant_id,
            session_id,
            values=values,
            start_events=start_events,
            max_live_runs=self.max_live_runs,
            expected=(loaded.session.version, loaded.session.created_at) if expected else None,
            idempotency=idempotency,
        )
        return record, started, options, start_events

    def _check_rate(self, tenant_id: str) -> None:
        """Runs per minute (this replica's window). Live runs per tenant (all replicas) are
        counted by the store in the transaction that creates the run."""
        now = time.monotonic()
        recent = self._recent.setdefault(tenant_id, collections.deque())
        while recent and recent[0] < now - 60:
            recent.popleft()
        if len(recent) >= self.max_runs_per_minute:
            wait = int(recent[0] + 60 - now) + 1
            raise TooManyRequests(
                f"at most {self.max_runs_per_minute} runs a minute", retry_after=wait
            )

    def _start_events(
        self, run_id: str, request: RunRequest, options: RunOptions
    ) -> list[NewEvent]:
        events = [
            ev.RunStarted(
                input=request.input,
                limits={
                    "max_total_turns": options.max_total_turns,
                    "max_auto_followups": options.max_auto_followups,
                    "max_tool_calls": options.max_tool_calls,
                    "max_wall_seconds": options.max_wall_seconds,
                    "max_tokens": options.max_tokens,
                },
                client_tools=[t.name for t in options.client_tools],
            ).event(run_id=run_id)
        ]
        if request.input is not None:
            item = {"type": "message", "role": "user", "content": request.input}
            if request.input_id is not None:
                item["id"] = request.input_id
            events.append(ev.UserInput(item=item).event(run_id=run_id))
        return events

    def resolve_options(self, agent: dict[str, Any], request: RunRequest) -> RunOptions:
        """Agent spec defaults, overridden per run by the request's limits.

        Raises:
            UnknownModelProfile, ModelProfileNotConfigured: the spec's profile cannot serve
                a run now (422, before anything is written).
        """
        spec = AgentSpec.model_validate(agent or {})
        profile = self.models.check(spec.provider)
        limits = request.limits
        client_tools = [
            ToolSpec(
                name=t["name"],
                description=t.get("description", ""),
                parameters=t.get("parameters") or {"type": "object", "properties": {}},
            )
            for t in request.client_tools
        ]
        server_tools = [
            t
            for t in self.tools.available(spec.tools)
            if t.name not in {c.name for c in client_tools}
        ]
        return RunOptions(
            model=spec.model or self.models.default_model(spec.provider),
            instructions=spec.instructions,
            server_tools=server_tools,
            client_tools=client_tools,
            approval_required=frozenset(spec.approval_required)
            | frozenset(request.approval_required)
            | frozenset(t.name for t in server_tools if t.requires_approval),
            max_total_turns=limits.get("max_total_turns") or spec.max_total_turns,
            max_auto_followups=_first(limits.get("max_auto_followups"), spec.max_auto_followups),
            max_tool_calls=_first(limits.get("max_tool_calls"), spec.max_tool_calls),
            max_wall_seconds=limits.get("max_wall_seconds") or spec.max_wall_seconds,
            max_tokens=limits.get("max_tokens") or spec.max_tokens,
            on_tool_error=request.on_tool_error or spec.on_tool_error,
            compaction=spec.compaction,
            summarizer=self.summarizer_for(agent),
            # The agent's budget, else the profile's context window.
            context_budget=budget_of(
                spec.max_input_tokens or profile.config.context_window,
                spec.reserved_output_tokens,
            ),
            profile=spec.provider,
        )

    def summarizer_for(self, agent: dict[str, Any]) -> Summarizer:
        spec = AgentSpec.model_validate(agent or {})
        if self.models.kind(spec.provider) == "scripted":
            return ScriptedSummarizer()
        # The client is looked up when a summary is asked for: a truncation needs none.
        return ModelSummarizer(_ProfileClient(self.models, spec.provider), spec.model)

    def model_for(self, agent: dict[str, Any]) -> ModelClient:
        provider = AgentSpec.model_validate(agent or {}).provider
        return self.models.client(provider)

    # ----------------------------------------------------------------- executing

    async def _execute(
        self,
        run: RunRecord,
        options: RunOptions,
        queued_events: list[NewEvent] | None,
        live: _Live,
        agent: dict[str, Any],
    ) -> None:
        """Run the loop to its end. `agent` is the session's spec as `start` just read it; a
        queued run reads it again once it has its turn, since it may wait a long time."""
        stop_heartbeat = asyncio.Event()
        heartbeat = asyncio.create_task(self._heartbeat(run, live, stop_heartbeat))
        started = time.monotonic()
        try:
            if queued_events is not None:
                claimed = await self._wait_for_turn(run, queued_events, live)
                if claimed is None:
                    return
                run = claimed
                agent = (await self.runtime.get(run.tenant_id, run.session_id)).agent
            controller = LoopController(
                run_id=run.run_id,
                options=options,
                model=_Interruptible(
                    self.model_for(agent),
                    live.interrupted,
                    provider=self.models.kind(AgentSpec.model_validate(agent or {}).provider),
                    observer=self.runtime.observer,
                ),
                tools=_InterruptibleTools(self.tools, live.interrupted),
                write=lambda events, progress: self._write(run, live, events, progress),
                load=lambda: self._state(run, live),
                publish=lambda frame: self._publish(run, live, frame),
                context=ToolContext(run.tenant_id, run.session_id, run.run_id),
            )
            outcome = await controller.run()
            await self._finish(run, live, outcome, controller)
            self.runtime.observer.run_finished(
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
                self.summarizer_for(agent),
                loaded=carried,
            )
        except RunFenced:
            pass  # taken over: whoever fenced the run writes its end
        except Exception as exc:  # a bug or an unexpected failure: the run fails, visibly
            log.exception("run %s failed unexpectedly", run.run_id)
            await self._fail(run, live, exc)
            self.runtime.observer.run_finished(
                stop_reason="FAILED", seconds=time.monotonic() - started
            )
        finally:
            stop_heartbeat.set()
            await heartbeat
            live.done.set()
            for queue in live.listeners:
                queue.put_nowait(("end", None))
            self._live.pop(run.run_id, None)

    async def _finish(
        self, run: RunRecord, live: _Live, outcome: Outcome, controller: LoopController
    ) -> None:
        result = await self._write(
            run,
            live,
            outcome.events,
            {"turns": controller.turns, "usage": dict(controller.usage)},
            finish=RunFinish(outcome.status, outcome.stop_reason, outcome.output, outcome.error),
        )
        live.ended = result.run

    async def _fail(self, run: RunRecord, live: _Live, exc: Exception) -> None:
        problem = {"code": "internal_error", "detail": "the run failed unexpectedly"}
        if isinstance(exc, AgentSessionError):
            problem = {"code": exc.code, "detail": exc.detail}
        events = [
            ev.Error(**problem).event(run_id=run.run_id),
            ev.RunFinished(status="failed", stop_reason=None).event(run_id=run.run_id),
        ]
        with contextlib.suppress(RunFenced):
            await self._write(
                run, live, events, None, finish=RunFinish("failed", None, None, problem)
            )

    async def _write(
        self,
        run: RunRecord,
        live: _Live,
        events: list[NewEvent],
        progress: dict[str, Any] | None,
        finish: RunFinish | None = None,
    ) -> AppendResult:
        result = await self.store.append_run_events(
            run.tenant_id,
            run.run_id,
            session_id=run.session_id,
            epoch=run.epoch,
            events=events,
            lease_until=self._lease_until(),
            progress=progress,
            finish=finish,
        )
        for event in result.events:
            for queue in live.listeners:
                queue.put_nowait(("event", event))
        self._carry(live, result, live.state)
        return result

    def _carry(self, live: _Live, result: AppendResult, state: SessionState | None) -> None:
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

    async def _state(self, run: RunRecord, live: _Live) -> SessionState:
        if live.state is not None:
            return live.state.copy()
        loaded = await self.runtime.load(run.tenant_id, run.session_id)
        live.state, live.session = loaded.state.copy(), loaded.session
        return loaded.state

    def _publish(self, run: RunRecord, live: _Live, frame: dict[str, Any]) -> None:
        # Deltas are never stored, but they reach people: they pass the same redaction.
        # (A secret split across two deltas is not caught here; the stored answer is.)
        frame = self.redactor.value(frame)
        self.runtime.live.publish_ephemeral(run.tenant_id, run.session_id, frame)
        for queue in live.listeners:
            queue.put_nowait(("delta", frame))

    async def _wait_for_turn(
        self, run: RunRecord, events: list[NewEvent], live: _Live
    ) -> RunRecord | None:
        """Enqueued runs claim the session in FIFO order once it is free."""
        while not live.interrupted.is_set():
            session = await self.runtime.get(run.tenant_id, run.session_id)
            if session.active_run_id is None:
                try:
                    claimed, result = await self.store.claim_run(
                        run.tenant_id,
                        run.run_id,
                        owner=self.owner,
                        lease_until=self._lease_until(),
                        events=events,
                        oldest_only=True,
                    )
                except RunAlreadyActive:
                    pass
                except RunFenced:
                    return None
                else:
                    for event in result.events:
                        for queue in live.listeners:
                            queue.put_nowait(("event", event))
                    return claimed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.interrupted.wait(), self.queue_poll_seconds)
        return None

    async def _heartbeat(self, run: RunRecord, live: _Live, stop: asyncio.Event) -> None:
        interval = self.lease.total_seconds() / 3
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if stop.is_set():
                return
            try:
                alive = await self.store.renew_lease(
                    run.tenant_id, run.run_id, epoch=run.epoch, lease_until=self._lease_until()
                )
            except Exception:  # a failed renewal is retried; the lease is longer than 3 beats
                log.warning("lease renewal failed for run %s", run.run_id, exc_info=True)
                continue
            if not alive:
                live.interrupted.set()
                return

    def _lease_until(self) -> datetime:
        return datetime.now(UTC) + self.lease

    # ------------------------------------------------------------ waiting, streams

    async def wait(
        self, tenant_id: str, run_id: str, within_seconds: float | None = None
    ) -> RunRecord:
        """Wait for a run to end (at most `within_seconds`), then return its stored record.

        A run of this process is awaited directly; a run of another process (a replayed
        request that landed elsewhere) by looking at its row every few hundred milliseconds.
        """
        live = self._live.get(run_id)
        if live is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.done.wait(), within_seconds)
            ended = live.ended
            if live.done.is_set() and ended is not None and ended.tenant_id == tenant_id:
                return ended  # an ended run's row no longer changes: no need to re-read it
        deadline = time.monotonic() + (within_seconds or 0)
        while True:
            run = await self.store.get_run(tenant_id, run_id)
            if run is None:
                raise RunNotFound(run_id)
            if run.status not in LIVE_STATUSES or live is not None:
                return run
            left = deadline - time.monotonic()
            if left <= 0 or self.shutdown_event.is_set():
                return run
            await asyncio.sleep(min(_WAIT_POLL_SECONDS, left))

    def listen(self, run_id: str) -> asyncio.Queue[tuple[str, Any]] | None:
        """A queue of ("event", Event) / ("delta", frame) / ("end", None) for a local run."""
        live = self._live.get(run_id)
        if live is None:
            return None
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        live.listeners.append(queue)
        return queue

    def unlisten(self, run_id: str, queue: asyncio.Queue[tuple[str, Any]]) -> None:
        live = self._live.get(run_id)
        if live is not None and queue in live.listeners:
            live.listeners.remove(queue)

    # ------------------------------------------------------- cancel and takeover

    async def cancel(self, tenant_id: str, session_id: str, run_id: str) -> RunRecord:
        """Interrupt a run wherever it executes; returns the run as it ends up."""
        run = await self.store.get_run(tenant_id, run_id)
        if run is None or run.session_id != session_id:
            raise RunNotFound(run_id)
        fenced = await self.store.fence_run(
            tenant_id, run_id, stop_reason=str(StopReason.INTERRUPTED)
        )
        live = self._live.get(run_id)
        if live is not None:
            live.interrupted.set()
        if fenced is not None:
            await self.close(tenant_id, run_id, reason="cancelled")
        if live is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.done.wait(), 5)
        result = await self.store.get_run(tenant_id, run_id)
        assert result is not None
        return result

    async def close(self, tenant_id: str, run_id: str, *, reason: str) -> None:
        """Closing events of a fenced run: interrupted tool calls, AUTO_STOP, RUN_FINISHED."""
        run = await self.store.get_run(tenant_id, run_id)
        if run is None:
            return
        state = (await self.runtime.load(tenant_id, run.session_id)).state
        events: list[NewEvent] = []
        for call_id, call in state.pending.items():
            if call.get("run_id") == run_id and call.get("kind") == "server":
                result = ev.ToolResult.answering(call_id, INTERRUPTED_OUTPUT, is_error=True)
                events.append(result.event(run_id=run_id))
        stop = str(StopReason.INTERRUPTED)
        events.append(ev.AutoStop(stop_reason=stop, reason=reason).event(run_id=run_id))
        events.append(ev.RunFinished(status="interrupted", stop_reason=stop).event(run_id=run_id))
        await self.store.close_fenced_run(tenant_id, run_id, events=events)
        began = run.started_at or run.created_at
        self.runtime.observer.run_finished(
            stop_reason=stop, seconds=(datetime.now(UTC) - began).total_seconds()
        )

    async def sweep_once(self) -> int:
        """Interrupt runs whose lease expired and close fenced runs left open; returns count."""
        closed = 0
        for run in await self.store.list_stale_runs():
            try:
                if run.status in ("queued", "running"):
                    fenced = await self.store.fence_run(
                        run.tenant_id,
                        run.run_id,
                        stop_reason=str(StopReason.INTERRUPTED),
                        only_expired=True,
                    )
                    if fenced is None:
                        continue
                    self.runtime.observer.lease_expired()
                await self.close(run.tenant_id, run.run_id, reason="lease_expired")
                closed += 1
            except Exception:
                log.warning("sweeping run %s failed; will retry", run.run_id, exc_info=True)
        return closed

    async def _sweep_forever(self) -> None:
        # Expired Idempotency-Keys are deleted here too, now and then: every keyed write
        # leaves one row, and nothing else would ever remove it.
        next_key_sweep = time.monotonic()
        while not self._closing.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self.sweep_seconds)
            if self._closing.is_set():
                return
            try:
                await self.sweep_once()
                if time.monotonic() >= next_key_sweep:
                    next_key_sweep = time.monotonic() + _KEY_SWEEP_SECONDS
                    await self.store.delete_expired_idempotency_keys()
            except Exception:
                log.warning("sweep failed", exc_info=True)

    def start_sweeper(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="run-sweeper")

    async def shutdown(self, grace_seconds: float = 5.0) -> None:
        """Let local runs finish within the grace period, then interrupt the rest."""
        self._closing.set()
        if self._sweeper is not None:
            await self._sweeper
        pending = [live.done.wait() for live in self._live.values()]
        if pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*pending), grace_seconds)
        for run_id, live in list(self._live.items()):
            task = live.task
            # cancel() fences the run before it interrupts it; interrupting first would let
            # the loop write its own ending (a failed run) before the fence.
            with contextlib.suppress(AgentSessionError):
                await self.cancel(live.run.tenant_id, live.run.session_id, run_id)
            if task is not None:
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(task), 2)

    def active_count(self) -> int:
        return len(self._live)


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


class _ProfileClient:
    """The client of a profile, looked up at each call (a summarizer made before the
    profile was configured, or before its key rotated, uses the client of the moment)."""

    def __init__(self, models: ModelRegistry, profile: str) -> None:
        self.models = models
        self.profile = profile

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> Any:
        return await self.models.client(self.profile).complete(request, on_delta)


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


def _first(value: Any, default: Any) -> Any:
    return default if value is None else value


def _options_json(request: RunRequest) -> dict[str, Any]:
    return {
        "multitask": request.multitask,
        "client_tools": request.client_tools,
        "approval_required": request.approval_required,
        "limits": request.limits,
        "on_tool_error": request.on_tool_error,
    }


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
    """Append the events `make_events` decides on the session as just read, only if the
    session is still at that seq (409 otherwise)."""
    loaded = await runtime.load(tenant_id, session_id)
    return await runtime.store.append_events(
        tenant_id,
        session_id,
        events=make_events(loaded),
        expected_seq=loaded.session.last_seq,
        idempotency=idempotency,
    )
