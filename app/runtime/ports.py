"""What the runtime needs from persistence: records, and one narrow port per concern.

The runtime depends on these protocols, never on SQLAlchemy. `app.store.stores.Stores`
holds their implementations on SQLite and PostgreSQL: `LedgerPort` is the ledger store,
`RunPort` the run store, `IdempotencyPort` the Idempotency-Key store and `MaintenancePort`
(part of) the maintenance store. The accounts, schedules, webhooks and retention keep their
ports beside the services that use them (`AccountStorePort`, `ScheduleStorePort`,
`WebhookStore`, `RetentionStore`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from app.runtime.session.events import Event, NewEvent
from app.runtime.session.subscription import Subscription


@dataclass(frozen=True, slots=True)
class TenantRecord:
    tenant_id: str
    name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    key_id: str
    tenant_id: str
    prefix: str
    secret_hash: str
    name: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class SessionRecord:
    tenant_id: str
    session_id: str
    root_session_id: str
    parent_session_id: str | None
    forked_from_seq: int | None
    status: str
    metadata: dict[str, Any]
    agent: dict[str, Any]
    binding: dict[str, Any]
    last_seq: int
    version: int
    active_run_id: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    session_id: str
    seq: int
    kind: str
    state: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SessionLoad:
    """What resuming a session reads, from one consistent view (`load_session`).

    `from_base`: the caller's own state is the base and `tail` follows it; otherwise the
    base is `snapshot` (None: the beginning of the ledger).
    """

    session: SessionRecord
    from_base: bool
    snapshot: SnapshotRecord | None
    tail: list[Event]


@dataclass(frozen=True, slots=True)
class RunRecord:
    tenant_id: str
    run_id: str
    session_id: str
    status: str
    stop_reason: str | None
    input: dict[str, Any] | None
    options: dict[str, Any]
    output: str | None
    error: dict[str, Any] | None
    usage: dict[str, int]
    turns: int
    first_seq: int | None
    last_seq: int | None
    epoch: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run to create (`RunPort.start_run`, `RunPort.enqueue_run`): the store turns it into
    the run's row (redacted, epoch 1, owned by `owner` until `lease_until`)."""

    run_id: str
    input: dict[str, Any] | None
    options: dict[str, Any]
    owner: str
    lease_until: datetime


@dataclass(frozen=True, slots=True)
class RunFinish:
    """How a run ends, written in the transaction of its last events."""

    status: str
    stop_reason: str | None
    output: str | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A schedule: its target, cadence, policies, and the tick it fires next (or is firing:
    `claim_tick_at`, claimed by `claimed_by` until `claim_expires_at`)."""

    tenant_id: str
    schedule_id: str
    session_id: str | None
    agent_name: str | None
    input: Any
    cron: str | None
    timezone: str
    interval_seconds: int | None
    anchor_at: datetime
    missed: str
    multitask: str
    status: str
    metadata: dict[str, Any]
    next_fire_at: datetime | None
    claim_tick_at: datetime | None
    claimed_by: str | None
    claim_expires_at: datetime | None
    last_fired_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class FireRecord:
    """What one tick of a schedule did (`ticks` > 1: a row standing for missed ticks)."""

    schedule_id: str
    tick_at: datetime
    trigger: str  # schedule | manual
    outcome: str  # started | skipped | failed
    reason: str | None
    ticks: int
    run_id: str | None
    session_id: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What one append transaction committed (`run`: the run row, when it ended the run)."""

    session: SessionRecord
    events: list[Event]
    run: RunRecord | None = None


_BIGINT_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True, order=True)
class TenantCursor:
    """A point in a tenant's whole timeline: (writing transaction id, global position).

    Readers only pass rows whose transaction is older than every one still running, so the
    cursor only ever moves over a prefix that can no longer change (DESIGN section 9). On
    SQLite the transaction id is 0: one writer at a time makes position order commit order.
    """

    xact_id: int = 0
    position: int = 0

    def encode(self) -> str:
        """The opaque string clients hold (an SSE id)."""
        return str(self.position) if self.xact_id == 0 else f"{self.xact_id}.{self.position}"

    @classmethod
    def parse(cls, raw: str) -> TenantCursor | None:
        """The cursor in `raw`, or None when it is not one `encode` makes."""
        head, dot, tail = raw.strip().partition(".")
        parts = (head, tail) if dot else ("0", head)
        if not all(p.isdigit() and len(p) <= 19 for p in parts):
            return None
        xact_id, position = int(parts[0]), int(parts[1])
        if max(xact_id, position) > _BIGINT_MAX:  # both are BIGINT columns
            return None
        return cls(xact_id, position)


@dataclass(frozen=True, slots=True)
class TenantPage:
    """One read of a tenant's timeline after a cursor."""

    entries: list[tuple[Event, TenantCursor]]
    more: bool  # the page is full: read again at once
    pending: bool  # committed rows wait behind a transaction still open: read again soon


@dataclass(frozen=True, slots=True)
class NewSession:
    session_id: str
    metadata: dict[str, Any]
    agent: dict[str, Any]
    binding: dict[str, Any]
    root_session_id: str | None = None
    parent_session_id: str | None = None
    forked_from_seq: int | None = None


@dataclass(frozen=True, slots=True)
class IdempotencyToken:
    """An Idempotency-Key that a write records in its own transaction (exactly once).

    The store inserts the key row, with what the write committed (`IdempotencyRecord.result`),
    in the same transaction as the work: after any fault either both are committed or
    neither is. A key row already there (a committed duplicate) makes the write roll back
    with `IdempotentReplay`.
    """

    key: str
    request_hash: str


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """A recorded Idempotency-Key.

    `result` is what the guarded write committed: `session_id`, `first_seq`, `last_seq`,
    `version`, and `run_id` for a run start; enough to answer the request again. The
    rendered answer (`status_code`, `response`, `headers`) is stored beside it once known,
    and from then on replayed byte for byte.
    """

    request_hash: str
    result: dict[str, Any]
    status_code: int | None = None
    response: bytes | None = None
    headers: dict[str, str] | None = None


class SessionWriter(Protocol):
    """The writes that are decided on a session's state: the ledger's and the runs' own, or
    those of a session the ledger holds (`LedgerPort.hold`), which then go into the held
    transaction."""

    async def append_events(
        self,
        tenant_id: str,
        session_id: str,
        *,
        events: list[NewEvent],
        expected_seq: int | None = None,
        expected_version: int | None = None,
        metadata_patch: dict[str, Any] | None = None,
        snapshot: tuple[str, dict[str, Any]] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult: ...

    async def start_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        run: NewRun,
        start_events: list[NewEvent],
        max_live_runs: int | None = None,
        expected: tuple[int, datetime] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> tuple[RunRecord, AppendResult]:
        """The run's row (built from `run`) and its first events, with the session claimed
        for it (only if it is still `expected`: (version, created_at), when given).

        Raises:
            SessionNotFound, RunAlreadyActive, StaleSession, TooManyRequests,
            IdempotentReplay.
        """
        ...


class HeldSession(SessionWriter, Protocol):
    """A session no other writer can change until the hold ends (`LedgerPort.hold`)."""

    async def load(self, *, base: tuple[datetime, int] | None = None) -> SessionLoad:
        """`LedgerPort.load_session` of the held session, as the hold sees it."""
        ...


class LedgerPort(Protocol):
    """Sessions, their events and snapshots (the ledger store). Every method takes
    `tenant_id` first. `SessionRuntime` is its only caller."""

    def hold(self, tenant_id: str, session_id: str) -> AbstractAsyncContextManager[HeldSession]:
        """Hold the session against every other writer, on every replica, until the block
        ends; the held session's writes commit with the block, or not at all.

        For a write decided on the session's state (a save's snapshot, an answer to a
        pending call) whose first try lost to another writer: decided again under the hold,
        it cannot lose again. Never for a write that waits on something slow.

        Raises:
            SessionNotFound.
        """
        ...

    async def create_session(
        self,
        tenant_id: str,
        *,
        session: NewSession,
        events: list[NewEvent],
        snapshot: tuple[str, dict[str, Any]] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult: ...

    async def fork_session(
        self,
        tenant_id: str,
        source_session_id: str,
        *,
        at_seq: int,
        session: NewSession,
        events: list[NewEvent],
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        """A child whose ledger is a copy of the source's events 1..at_seq, then `events`,
        with a copy of the source's newest snapshot at or below `at_seq` (the fold of the
        same events, so the child's too): both copied inside the database, never folded,
        decoded or encoded on the way. Its first cold load folds the events after that
        snapshot (and keeps a snapshot if they are many, as every load does)."""
        ...

    async def get_session(self, tenant_id: str, session_id: str) -> SessionRecord | None: ...

    async def load_session(
        self, tenant_id: str, session_id: str, *, base: tuple[datetime, int] | None = None
    ) -> SessionLoad | None: ...

    async def list_sessions(
        self,
        tenant_id: str,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        status: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> list[SessionRecord]: ...

    async def delete_session(self, tenant_id: str, session_id: str) -> bool: ...

    async def count_sessions(self, tenant_id: str) -> int: ...

    async def append_events(
        self,
        tenant_id: str,
        session_id: str,
        *,
        events: list[NewEvent],
        expected_seq: int | None = None,
        expected_version: int | None = None,
        metadata_patch: dict[str, Any] | None = None,
        snapshot: tuple[str, dict[str, Any]] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult: ...

    async def list_events(
        self,
        tenant_id: str,
        session_id: str,
        *,
        after_seq: int = 0,
        until_seq: int | None = None,
        types: list[str] | None = None,
        run_id: str | None = None,
        limit: int | None = None,
    ) -> list[Event]: ...

    async def get_snapshot(
        self, tenant_id: str, session_id: str, *, at_or_below: int | None = None
    ) -> SnapshotRecord | None: ...

    async def list_tenant_events(
        self,
        tenant_id: str,
        *,
        after: TenantCursor,
        types: list[str] | None = None,
        limit: int = 500,
    ) -> TenantPage: ...

    async def save_snapshot(
        self, tenant_id: str, session_id: str, *, seq: int, kind: str, state: dict[str, Any]
    ) -> bool: ...


class IdempotencyPort(Protocol):
    """The Idempotency-Keys (the idempotency store): read back, and answered."""

    async def get_idempotency_key(self, tenant_id: str, key: str) -> IdempotencyRecord | None: ...

    async def store_idempotent_response(
        self,
        tenant_id: str,
        token: IdempotencyToken,
        *,
        status_code: int,
        response: bytes,
        headers: dict[str, str],
    ) -> None: ...


class RunPort(Protocol):
    """The run rows and the writes that go with them (DESIGN §9): leases, fences, the
    events a run writes (the run store). `SessionRuntime` is its only caller."""

    async def start_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        run: NewRun,
        start_events: list[NewEvent],
        max_live_runs: int | None = None,
        expected: tuple[int, datetime] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> tuple[RunRecord, AppendResult]: ...

    async def enqueue_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        run: NewRun,
        max_live_runs: int | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> RunRecord: ...

    async def claim_run(
        self,
        tenant_id: str,
        run_id: str,
        *,
        owner: str,
        lease_until: datetime,
        events: list[NewEvent],
        oldest_only: bool = False,
    ) -> tuple[RunRecord, AppendResult]: ...

    async def append_run_events(
        self,
        tenant_id: str,
        run_id: str,
        *,
        session_id: str,
        epoch: int,
        events: list[NewEvent],
        lease_until: datetime,
        progress: dict[str, Any] | None = None,
        finish: RunFinish | None = None,
    ) -> AppendResult: ...

    async def renew_lease(
        self, tenant_id: str, run_id: str, *, epoch: int, lease_until: datetime
    ) -> bool: ...

    async def fence_run(
        self, tenant_id: str, run_id: str, *, stop_reason: str, only_expired: bool = False
    ) -> RunRecord | None: ...

    async def close_fenced_run(
        self, tenant_id: str, run_id: str, *, events: list[NewEvent]
    ) -> AppendResult | None: ...

    async def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None: ...

    async def list_runs(
        self, tenant_id: str, session_id: str, *, limit: int = 100
    ) -> list[RunRecord]: ...


class MaintenancePort(Protocol):
    """The housekeeping the runtime does (the maintenance store): the run sweeper's list,
    expired keys, the schema's revision for readiness."""

    async def list_stale_runs(self, *, limit: int = 100) -> list[RunRecord]: ...

    async def delete_expired_idempotency_keys(self) -> int: ...

    async def get_schema_revision(self) -> str | None: ...


class LiveFrames(Protocol):
    """Ephemeral frames (token and reasoning deltas) for live subscribers on every replica.

    They have no seq and are never persisted. The bus relays them (coalesced) to the other
    replicas and keeps the turn's text so far for subscribers that join mid-turn, until
    `end_turn` says the turn's text is final.
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
    stops its model call or tool now. Delivery is best effort: the owner's lease renewal
    finds the fence anyway, one heartbeat later.
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
