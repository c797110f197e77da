"""`RunManager`: starts runs, waits for them, cancels them; the front of `app.runtime.runs`.

Whoever fences a run (any replica) sends an "interrupt" control message (`RunControl`: the
bus, NOTIFY on PostgreSQL); the replica executing the run aborts its model call or tool at
once. If the message is lost, the owner's next lease renewal finds the fence (the fallback).
Live clients follow a run through the bus like any timeline (`app.live.timeline.run_timeline`):
nothing here pushes to them but the ephemeral delta frames.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
import uuid
from dataclasses import dataclass
from typing import Any

from app.logs import task_context
from app.runtime.errors import (
    AgentSessionError,
    NothingPending,
    RunNotFound,
    StaleSession,
    ToolCallsPending,
    TooManyRequests,
)
from app.runtime.memory.compaction import Summarizer
from app.runtime.models.base import ModelClient
from app.runtime.models.registry import ModelRegistry
from app.runtime.ports import (
    AppendResult,
    IdempotencyToken,
    LocalControl,
    NewRun,
    RunControl,
    RunRecord,
    RunSignal,
    SessionWriter,
)
from app.runtime.runs.answers import Prefix
from app.runtime.runs.execute import LiveRun, RunExecutor
from app.runtime.runs.lease import Lease
from app.runtime.runs.loop import RunOptions, StopReason
from app.runtime.runs.plan import RunPlanner, RunRequest, start_events
from app.runtime.runs.takeover import Sweeper, close_fenced
from app.runtime.session.events import Event, NewEvent
from app.runtime.session.redaction import Redactor
from app.runtime.session.service import Loaded, SessionRuntime
from app.runtime.tools.registry import ToolRegistry

# A run in one of these has not ended yet.
LIVE_STATUSES = ("queued", "running")
# How often a wait for a run of another process looks at its row.
_WAIT_POLL_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class _Created:
    """A run just created, and the session state it was decided on."""

    loaded: Loaded
    run: RunRecord
    started: AppendResult | None  # None: queued
    options: RunOptions
    first_events: list[NewEvent]


class RunManager:
    def __init__(
        self,
        runtime: SessionRuntime,
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
        control: RunControl | None = None,
        delta_tick_seconds: float = 0.05,
    ) -> None:
        self.runtime = runtime
        self.max_live_runs = max_live_runs_per_tenant
        self.max_runs_per_minute = max_runs_per_minute
        self._recent: dict[str, collections.deque[float]] = {}
        # Set when the process starts shutting down: run streams send a final `shutdown`
        # frame and end, so the server's drain is not held open by them.
        self.shutdown_event = shutdown_event or asyncio.Event()
        # A plain mapping of clients (tests, embedders) serves each as a profile of its name.
        self.models = (
            models if isinstance(models, ModelRegistry) else ModelRegistry.of_clients(models)
        )
        self.planner = RunPlanner(self.models, tools)
        self.lease = Lease(
            runtime,
            owner=owner,
            lease_seconds=lease_seconds,
            queue_poll_seconds=queue_poll_seconds,
        )
        self.executor = RunExecutor(
            runtime,
            self.planner,
            self.lease,
            redactor=redactor or Redactor(),
            delta_tick_seconds=delta_tick_seconds,
        )
        self.sweeper = Sweeper(runtime, self._interrupt, sweep_seconds=sweep_seconds)
        self._live: dict[str, LiveRun] = {}
        # Cancels and interrupts taken by any replica reach the run's owner through this.
        self.control = control or LocalControl()
        self.control.on_control(self._on_control)

    @property
    def owner(self) -> str:
        return self.lease.owner

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
        start is then conditional on the session still being that version, and decided
        again on the current state when it was not (`SessionRuntime.decided`).

        Raises:
            SessionNotFound, RunAlreadyActive (multitask "reject"), ToolCallsPending,
            NothingPending (from `prefix`), IdempotentReplay.
        """
        self._check_rate(tenant_id)
        if request.multitask == "interrupt":
            # Before the start is decided: the cancel is a write of its own to the session,
            # which must not wait on a hold of the start (`SessionRuntime.decided`).
            active = (await self.runtime.get(tenant_id, session_id)).active_run_id
            if active:
                await self.cancel(tenant_id, session_id, active)
        # The cached view of the session, when this process has one, spares a read: the
        # start is then conditional on the session still being that version (StaleSession
        # otherwise, and the start is decided on the current state instead).
        loaded = self.runtime.cached(tenant_id, session_id)
        created = None
        if loaded is not None and request.multitask == "reject":
            try:
                writer = self.runtime.writer
                created = await self._create(
                    tenant_id, session_id, request, loaded, idempotency, prefix, writer,
                    expected=True,
                )  # fmt: skip
            except (StaleSession, ToolCallsPending, NothingPending):
                pass  # the cached view may be behind: decide on a fresh read
        if created is None:

            async def write(current: Loaded, writer: SessionWriter) -> _Created:
                return await self._create(
                    tenant_id, session_id, request, current, idempotency, prefix, writer,
                    expected=prefix is not None,
                )  # fmt: skip

            created = await self.runtime.decided(tenant_id, session_id, write)
        loaded = created.loaded
        record, started, options, first_events = (
            created.run,
            created.started,
            created.options,
            created.first_events,
        )
        queued = started is None
        self._recent[tenant_id].append(time.monotonic())
        live = LiveRun(run=record)
        if started is not None:
            self.executor.carry(live, started, loaded.state)
            live.first_events = tuple(started.events)
        self._live[record.run_id] = live
        live.task = asyncio.create_task(
            self._execute(
                record, options, first_events if queued else None, live, loaded.session.agent
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
        writer: SessionWriter,
        *,
        expected: bool,
    ) -> _Created:
        """Check the request against the session as `loaded` has it, then create the run
        with `writer` (only if the session is still that version, with `expected`)."""
        options = self.planner.resolve_options(loaded.session.agent, request)
        if request.input is not None:
            waiting = [
                cid
                for cid, c in loaded.state.pending.items()
                if c.get("kind") in ("client", "approval") and c.get("decision") is None
            ]
            if waiting:
                raise ToolCallsPending(waiting)
        run_id = request.run_id or f"run_{uuid.uuid4().hex}"
        first_events = start_events(run_id, request, options)
        if prefix is not None:
            first_events = prefix(loaded) + first_events
        run = NewRun(
            run_id=run_id,
            input=request.input,
            options=request.options_json(),
            owner=self.owner,
            lease_until=self.lease.until(),
        )
        if request.multitask == "enqueue":
            record = await self.runtime.enqueue_run(
                tenant_id,
                session_id,
                run=run,
                max_live_runs=self.max_live_runs,
                idempotency=idempotency,
            )
            return _Created(loaded, record, None, options, first_events)
        record, started = await writer.start_run(
            tenant_id,
            session_id,
            run=run,
            start_events=first_events,
            max_live_runs=self.max_live_runs,
            expected=(loaded.session.version, loaded.session.created_at) if expected else None,
            idempotency=idempotency,
        )
        return _Created(loaded, record, started, options, first_events)

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

    async def _execute(
        self,
        run: RunRecord,
        options: RunOptions,
        queued_events: list[NewEvent] | None,
        live: LiveRun,
        agent: dict[str, Any],
    ) -> None:
        try:
            await self.executor.execute(run, options, queued_events, live, agent)
        finally:
            self._live.pop(run.run_id, None)

    # ------------------------------------------------------------------ reading

    def start_events(self, tenant_id: str, run: RunRecord) -> tuple[Event, ...]:
        """The events `run`'s start committed, when this process started it and they are
        exactly the run's events so far (first_seq .. last_seq as `run` has them); else ().
        A stream of the run opened right after its start sends these without a read."""
        live = self._live.get(run.run_id)
        if live is None or live.run.tenant_id != tenant_id or not live.first_events:
            return ()
        events = live.first_events
        if events[0].seq > (run.first_seq or 0) or events[-1].seq != run.last_seq:
            return ()
        return events

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
            run = await self.get_run(tenant_id, run_id)
            if run.status not in LIVE_STATUSES or live is not None:
                return run
            left = deadline - time.monotonic()
            if left <= 0 or self.shutdown_event.is_set():
                return run
            await asyncio.sleep(min(_WAIT_POLL_SECONDS, left))

    async def get_run(self, tenant_id: str, run_id: str) -> RunRecord:
        """The run as stored. Raises RunNotFound."""
        run = await self.runtime.find_run(tenant_id, run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run

    async def list_runs(self, tenant_id: str, session_id: str) -> list[RunRecord]:
        """The session's runs, newest first."""
        return await self.runtime.list_runs(tenant_id, session_id)

    def summarizer_for(self, agent: dict[str, Any]) -> Summarizer:
        """The summarizer a session's agent compacts with (manual compaction uses it)."""
        return self.planner.summarizer_for(agent)

    # ------------------------------------------------------- cancel and takeover

    async def cancel(self, tenant_id: str, session_id: str, run_id: str) -> RunRecord:
        """Interrupt a run wherever it executes; returns the run as it ends up.

        The fence comes first (from then on the owner can write nothing), then the interrupt
        goes to whichever replica executes the run, so its model call or tool stops now, and
        then the closing events are written here.
        """
        run = await self.runtime.find_run(tenant_id, run_id)
        if run is None or run.session_id != session_id:
            raise RunNotFound(run_id)
        fenced = await self.runtime.fence_run(
            tenant_id, run_id, stop_reason=str(StopReason.INTERRUPTED)
        )
        live = self._live.get(run_id)
        if fenced is not None:
            await self._interrupt(tenant_id, run_id)
        elif live is not None:
            live.interrupted.set()
        if fenced is not None:
            await self.close(tenant_id, run_id, reason="cancelled")
        if live is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.done.wait(), 5)
        return await self.get_run(tenant_id, run_id)

    async def close(self, tenant_id: str, run_id: str, *, reason: str) -> None:
        """Write the closing events of a run this replica fenced."""
        await close_fenced(self.runtime, tenant_id, run_id, reason=reason)

    async def _interrupt(self, tenant_id: str, run_id: str) -> None:
        """Tell the run's owner, wherever it is, that the run was fenced."""
        await self.control.send_control(RunSignal("interrupt", tenant_id, run_id))

    def _on_control(self, signal: RunSignal) -> None:
        """A control message from any replica (this one included): act on our own runs."""
        live = self._live.get(signal.run_id)
        if live is None or live.run.tenant_id != signal.tenant_id:
            return
        if signal.kind == "interrupt":
            live.interrupted.set()

    async def sweep_once(self) -> int:
        return await self.sweeper.sweep_once()

    def start_sweeper(self) -> None:
        self.sweeper.start()

    async def shutdown(self, grace_seconds: float = 5.0) -> None:
        """Let local runs finish within the grace period, then interrupt the rest."""
        await self.sweeper.stop()
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
