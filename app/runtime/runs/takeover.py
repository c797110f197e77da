"""One takeover for cancel, interrupt and the sweeper: fence the run (bump its epoch and
mark it interrupted: from then on its owner can write nothing), tell the owner to stop,
then write the closing events and free the session.

A tool call that may have started in a dead run is answered "interrupted", never executed
again (at most once). The sweeper runs on every replica; fencing is a compare-and-set, so
two sweepers never both take over one run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from app.runtime.ports import RunRecord
from app.runtime.runs.loop import StopReason
from app.runtime.session import event_payloads as ev
from app.runtime.session.events import NewEvent
from app.runtime.session.service import SessionRuntime

log = logging.getLogger("app.runs")

INTERRUPTED_OUTPUT = "error: interrupted — the run stopped before this tool call finished"
# How often a replica deletes expired Idempotency-Keys (any replica may; it is idempotent).
_KEY_SWEEP_SECONDS = 600.0
# A run fenced this recently is left to whoever fenced it (a cancel writes the closing
# events right after its fence); the sweeper closes it only if that fencer died.
_FENCER_GRACE_SECONDS = 10.0

Interrupt = Callable[[str, str], Awaitable[None]]


async def close_fenced(
    runtime: SessionRuntime, tenant_id: str, run_id: str, *, reason: str
) -> None:
    """Closing events of a fenced run: interrupted tool calls, AUTO_STOP, RUN_FINISHED."""
    run = await runtime.find_run(tenant_id, run_id)
    if run is None:
        return
    state = (await runtime.load(tenant_id, run.session_id)).state
    events: list[NewEvent] = []
    for call_id, call in state.pending.items():
        if call.get("run_id") == run_id and call.get("kind") == "server":
            result = ev.ToolResult.answering(call_id, INTERRUPTED_OUTPUT, is_error=True)
            events.append(result.event(run_id=run_id))
    stop = str(StopReason.INTERRUPTED)
    events.append(ev.AutoStop(stop_reason=stop, reason=reason).event(run_id=run_id))
    events.append(ev.RunFinished(status="interrupted", stop_reason=stop).event(run_id=run_id))
    await runtime.close_fenced_run(tenant_id, run_id, events=events)
    began = run.started_at or run.created_at
    runtime.observer.run_finished(
        stop_reason=stop, seconds=(datetime.now(UTC) - began).total_seconds()
    )


class Sweeper:
    """Takes over runs whose lease expired and closes fenced runs left open (their closer
    died between fence and close); now and then deletes expired Idempotency-Keys too, since
    every keyed write leaves one row and nothing else would ever remove it."""

    def __init__(
        self, runtime: SessionRuntime, interrupt: Interrupt, *, sweep_seconds: float = 5.0
    ) -> None:
        self.runtime = runtime
        self.interrupt = interrupt
        self.sweep_seconds = sweep_seconds
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    async def sweep_once(self) -> int:
        """Interrupt runs whose lease expired and close fenced runs left open; returns count."""
        closed = 0
        for run in await self.runtime.list_stale_runs():
            try:
                if run.status in ("queued", "running"):
                    fenced = await self.runtime.fence_run(
                        run.tenant_id,
                        run.run_id,
                        stop_reason=str(StopReason.INTERRUPTED),
                        only_expired=True,
                    )
                    if fenced is None:
                        continue
                    self.runtime.observer.lease_expired()
                    # A paused owner (not a dead one) stops at once when it comes back.
                    await self.interrupt(run.tenant_id, run.run_id)
                elif _fenced_within(run, _FENCER_GRACE_SECONDS):
                    continue  # its fencer (a cancel, an interrupt) is closing it right now
                await close_fenced(self.runtime, run.tenant_id, run.run_id, reason="lease_expired")
                closed += 1
            except Exception:
                log.warning("sweeping run %s failed; will retry", run.run_id, exc_info=True)
        return closed

    def start(self) -> None:
        self._task = asyncio.create_task(self._forever(), name="run-sweeper")

    async def stop(self) -> None:
        self._closing.set()
        if self._task is not None:
            await self._task

    async def _forever(self) -> None:
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
                    await self.runtime.delete_expired_idempotency_keys()
            except Exception:
                log.warning("sweep failed", exc_info=True)


def _fenced_within(run: RunRecord, seconds: float) -> bool:
    """Whether an interrupted run was fenced less than `seconds` ago."""
    fenced_at = run.finished_at
    return fenced_at is not None and datetime.now(UTC) - fenced_at < timedelta(seconds=seconds)
