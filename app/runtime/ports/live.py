"""The live path's ports: ephemeral frames, run control, committed wake-ups, the bus
(`app.live` implements them)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from app.runtime.session.events import Event
from app.runtime.session.subscription import Subscription


class LiveFrames(Protocol):
    """Ephemeral frames (token and reasoning deltas) for live subscribers on every replica.

    They have no seq and are never persisted. The run coalesces them per writer tick; the
    bus relays them to the other replicas and keeps the turn's text so far for subscribers
    that join mid-turn, until `end_turn` says the turn's text is final.
    """

    def publish_ephemeral(
        self,
        tenant_id: str,
        session_id: str,
        frame: dict[str, Any],
        *,
        after_seq: int | None = None,
    ) -> None:
        """A frame for the session's subscribers on every replica, each of which passes on
        the session's events up to `after_seq` (the run's last write) before it."""
        ...

    async def end_turn(
        self, tenant_id: str, session_id: str, *, run_id: str | None, turn_id: str | None
    ) -> None:
        """The turn's model call returned; returns once its deltas are on their way to every
        replica (so they precede the turn's events there)."""
        ...


class NoLiveFrames:
    """The default when no bus is wired in: deltas go nowhere."""

    def publish_ephemeral(
        self,
        tenant_id: str,
        session_id: str,
        frame: dict[str, Any],
        *,
        after_seq: int | None = None,
    ) -> None:
        return None

    async def end_turn(
        self, tenant_id: str, session_id: str, *, run_id: str | None, turn_id: str | None
    ) -> None:
        return None


@dataclass(frozen=True, slots=True)
class RunSignal:
    """A control message about a run for the replica that executes it.

    `kind` is "interrupt": the run was fenced (cancelled, interrupted, swept), so its owner
    stops its model call or tool now. `erase_session` (`run_id` is the session's id) and
    `erase_tenant` (`run_id` is `*`) say what was erased, for every replica to drop it.
    Delivery is best effort: the owner's lease renewal finds the fence anyway, one
    heartbeat later.
    """

    kind: str
    tenant_id: str
    run_id: str


class RunControl(Protocol):
    """Run control across replicas (the bus: NOTIFY on PostgreSQL, in-process on SQLite)."""

    async def send_control(self, signal: RunSignal) -> None: ...

    def on_control(self, handler: Callable[[RunSignal], None]) -> None: ...


class LocalControl:
    """Run control within one process: the default when no bus is wired in."""

    def __init__(self) -> None:
        self._handlers: list[Callable[[RunSignal], None]] = []

    async def send_control(self, signal: RunSignal) -> None:
        for handler in list(self._handlers):
            handler(signal)

    def on_control(self, handler: Callable[[RunSignal], None]) -> None:
        self._handlers.append(handler)


@dataclass(frozen=True, slots=True)
class Wakeup:
    """Session `session_id` of `tenant_id` has committed events up to `last_seq` (None:
    unknown).

    `session_id` None means any session of the tenant may have changed. `events`, in this
    process only (never sent), are the committed events ending at `last_seq` when the writer
    has them all (a stored function's append on PostgreSQL, a job of SQLite's writer): the
    bus hands them on without reading them back.
    """

    tenant_id: str
    session_id: str | None = None
    last_seq: int | None = None
    events: tuple[Event, ...] = ()


class LiveDelivery(LiveFrames, Protocol):
    """The live path's contract (`app.live`): subscribe to a session from a seq, publish
    committed events, publish ephemeral deltas (`LiveFrames`).

    The table is the data of record: a subscriber replays it after its cursor and then
    takes what the subscription delivers, dropping what it has seen by seq
    (`app.live.timeline.replay_then_live`).
    """

    def subscribe(
        self, tenant_id: str, session_id: str, *, head: int, deltas: bool = False
    ) -> AbstractContextManager[Subscription]:
        """The session's events after `head` (a last_seq read before this call) as they
        commit, and, with `deltas`, its ephemeral frames (the turn so far first)."""
        ...

    def publish_committed(self, wakeup: Wakeup) -> None:
        """Events up to `wakeup.last_seq` are committed (the store's `Announcer` calls it
        after every commit; a NOTIFY from another replica too)."""
        ...


class LiveBus(LiveDelivery, RunControl, Protocol):
    """The event bus as the API and the runtime see it (`app.live.bus.EventBus`): the live
    path, tenant subscriptions, run control, gauges."""

    def subscribe_tenant(self, tenant_id: str) -> AbstractContextManager[Subscription]: ...

    def stats(self) -> dict[str, Any]: ...
