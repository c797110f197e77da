"""Ownership of a run: a lease with an epoch (docs/explanation/design-notes.md).

The owner renews the lease while it works and every write it makes is fenced by the epoch;
a renewal that finds the run fenced (cancelled elsewhere, or taken over by the sweeper)
interrupts the local run — the fallback for a control message that never arrived. A queued
run becomes the owner of its session by claiming it once the session is free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from datetime import UTC, datetime, timedelta

from app.runtime.errors import RunAlreadyActive, RunFenced
from app.runtime.ports import RunRecord
from app.runtime.session.events import NewEvent
from app.runtime.session.service import SessionRuntime

log = logging.getLogger("app.runs")


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """This replica's side of the leases of the runs it executes."""

    def __init__(
        self,
        runtime: SessionRuntime,
        *,
        owner: str | None = None,
        lease_seconds: float = 30.0,
        queue_poll_seconds: float = 0.1,
    ) -> None:
        self.runtime = runtime
        self.owner = owner or default_owner()
        self.length = timedelta(seconds=lease_seconds)
        self.queue_poll_seconds = queue_poll_seconds

    def until(self) -> datetime:
        """When a lease taken or renewed now runs out."""
        return datetime.now(UTC) + self.length

    def heartbeat(self, run: RunRecord, interrupted: asyncio.Event) -> Heartbeat:
        """Start keeping `run`'s lease; `stop()` the result when the run ends."""
        return Heartbeat(self, run, interrupted)

    async def keep(self, run: RunRecord, interrupted: asyncio.Event, stop: asyncio.Event) -> None:
        """Renew the lease now, then every third of it, until `stop`; set `interrupted` when
        the run turns out to be fenced."""
        interval = self.length.total_seconds() / 3
        while not stop.is_set():
            try:
                alive = await self.runtime.renew_lease(
                    run.tenant_id, run.run_id, epoch=run.epoch, lease_until=self.until()
                )
            except Exception:  # a failed renewal is retried; the lease is longer than 3 beats
                log.warning("lease renewal failed for run %s", run.run_id, exc_info=True)
                alive = True
            if not alive:
                interrupted.set()
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)

    async def claim_turn(
        self, run: RunRecord, events: list[NewEvent], interrupted: asyncio.Event
    ) -> RunRecord | None:
        """Wait until the session is free, then claim it for this queued run (enqueued runs
        take their turns in FIFO order); None if the run was interrupted first."""
        while not interrupted.is_set():
            session = await self.runtime.get(run.tenant_id, run.session_id)
            if session.active_run_id is None:
                try:
                    claimed, _ = await self.runtime.claim_run(
                        run.tenant_id,
                        run.run_id,
                        owner=self.owner,
                        lease_until=self.until(),
                        events=events,
                        oldest_only=True,
                    )
                except RunAlreadyActive:
                    pass
                except RunFenced:
                    return None
                else:
                    return claimed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(interrupted.wait(), self.queue_poll_seconds)
        return None


class Heartbeat:
    """A run's lease renewals, started only when the first one is due.

    Most runs end well within a third of their lease (the start wrote it), so a timer is
    armed instead of a task: a run that ends first cancels the timer and never pays for a
    task, an event and a timeout of its own.
    """

    def __init__(self, lease: Lease, run: RunRecord, interrupted: asyncio.Event) -> None:
        self.lease, self.run, self.interrupted = lease, run, interrupted
        self.stopped = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        interval = lease.length.total_seconds() / 3
        self.timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            interval, self._begin
        )

    def _begin(self) -> None:
        self.timer = None
        self.task = asyncio.create_task(self.lease.keep(self.run, self.interrupted, self.stopped))

    async def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.stopped.set()
        if self.task is not None:
            await self.task
