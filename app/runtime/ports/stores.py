"""The store ports, one protocol per concern: `LedgerPort` (with `SessionWriter` and
`HeldSession`), `RunPort`, `IdempotencyPort`, `MaintenancePort` (`SessionRuntime` is their
one caller), `AccountPort` (`Accounts`), `SchedulePort` (`Scheduler`), `RetentionPort` and
`TenantList` (`apply_retention`), `ErasurePort` (`Eraser`). `app.store.stores.Stores` holds
their implementations; the webhooks' port is beside its records
(`app.runtime.webhooks.records.WebhookPort`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Protocol

from app.runtime.ports.records import (
    ApiKeyRecord,
    AppendResult,
    ErasureReceipt,
    FireRecord,
    IdempotencyRecord,
    IdempotencyToken,
    NewRun,
    NewSession,
    PruneFacts,
    PruneOutcome,
    RunFinish,
    RunRecord,
    ScheduleRecord,
    SessionLoad,
    SessionRecord,
    SnapshotRecord,
    TenantCursor,
    TenantPage,
    TenantRecord,
    TenantRetention,
)
from app.runtime.session.events import Event, NewEvent


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
        self,
        tenant_id: str,
        session_id: str,
        *,
        base: tuple[datetime, int] | None = None,
        lagging: bool = False,
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

    async def list_snapshots(self, tenant_id: str, session_id: str) -> list[SnapshotRecord]:
        """Every snapshot of the session, oldest first (state included)."""
        ...

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

    async def prune_session(
        self,
        tenant_id: str,
        session_id: str,
        *,
        decide: Callable[[PruneFacts], int | str],
        mark: Callable[[PruneFacts, int, int], NewEvent],
        dry_run: bool = False,
    ) -> PruneOutcome | None:
        """Prune the session's ledger up to a snapshot, in one transaction under the session
        row's lock, taken without waiting: None when another writer (a replica's pass) holds
        it, or when there is no such session.

        `decide(facts)` returns the seq of the snapshot to cut at, or why not (a reason);
        `mark(facts, cut, n)` builds the one HISTORY_PRUNED event put at seq `cut` in place
        of the `n` events up to it (the earlier marker not counted). Events at or below the
        cut and snapshots below it are deleted; `last_seq`, `version` and the state stay as
        they are. In a dry run nothing is written and the outcome says what would go.
        """
        ...


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
    """The run rows and the writes that go with them: leases, fences, the
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


class AccountPort(Protocol):
    """Tenants and API keys (the account store); the lookups span tenants."""

    async def create_tenant(self, name: str) -> TenantRecord: ...
    async def get_tenant_by_name(self, name: str) -> TenantRecord | None: ...
    async def count_tenants(self) -> int: ...
    async def list_tenants(self) -> list[TenantRecord]: ...
    async def create_api_key(
        self, tenant_id: str, *, prefix: str, secret_hash: str, name: str
    ) -> ApiKeyRecord: ...
    async def get_api_key(self, prefix: str) -> ApiKeyRecord | None: ...
    async def list_api_keys(self, tenant_id: str) -> list[ApiKeyRecord]: ...
    async def revoke_api_key(self, prefix: str) -> bool: ...
    async def list_live_key_prefixes(self, prefixes: Collection[str]) -> set[str]: ...


class SchedulePort(Protocol):
    """Schedules and their fires (the schedule store); the due list spans tenants."""

    async def create_schedule(
        self, tenant_id: str, *, values: dict[str, Any], idempotency: IdempotencyToken | None
    ) -> ScheduleRecord: ...
    async def get_schedule(self, tenant_id: str, schedule_id: str) -> ScheduleRecord | None: ...
    async def list_schedules(
        self, tenant_id: str, *, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[ScheduleRecord]: ...
    async def save_schedule(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        expected_version: int,
        values: dict[str, Any],
        fires: Sequence[FireRecord] = (),
    ) -> ScheduleRecord | None: ...
    async def finish_schedule_tick(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        tick_at: datetime,
        owner: str,
        next_fire_at: datetime,
        fire: FireRecord,
    ) -> bool: ...
    async def append_schedule_fire(self, tenant_id: str, fire: FireRecord) -> None: ...
    async def delete_schedule(self, tenant_id: str, schedule_id: str) -> bool: ...
    async def list_schedule_fires(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        limit: int,
        before: tuple[datetime, str] | None = None,
        run_id: str | None = None,
    ) -> list[FireRecord]: ...
    async def list_due_schedules(self, *, limit: int = 100) -> list[tuple[str, str]]: ...


class TenantList(Protocol):
    """Which tenants there are (the account store)."""

    async def list_tenants(self) -> list[TenantRecord]: ...


class RetentionPort(Protocol):
    """What a retention pass reads and removes (the maintenance store), and the policies
    it applies."""

    async def get_tenant_policy(self, tenant_id: str) -> TenantRetention | None: ...

    async def put_tenant_policy(
        self, tenant_id: str, policy: TenantRetention
    ) -> TenantRetention | None: ...

    async def set_session_retention(
        self, tenant_id: str, session_id: str, *, changes: dict[str, Any]
    ) -> SessionRecord | None: ...

    async def list_retention_candidates(
        self,
        tenant_id: str,
        *,
        now: datetime,
        idle_before: datetime | None,
        after: str | None,
        limit: int,
    ) -> list[SessionRecord]: ...

    async def delete_due_session(
        self, tenant_id: str, session_id: str, *, due: Callable[[SessionRecord], bool]
    ) -> bool: ...

    async def list_prunable_sessions(
        self, tenant_id: str, *, min_last_seq: int, after: str | None, limit: int
    ) -> list[str]: ...

    async def delete_old_snapshots(self, tenant_id: str, *, keep: int) -> int: ...

    async def delete_settled_deliveries(self, tenant_id: str, *, before: datetime) -> int: ...


class ErasurePort(Protocol):
    """What an erasure removes and records (the erasure store): every row of a session or
    of a tenant, in one transaction each, and the receipts."""

    async def list_delegated_children(self, tenant_id: str, session_id: str) -> list[str]: ...

    async def erase_session(self, tenant_id: str, session_id: str) -> dict[str, int] | None: ...

    async def erase_tenant(self, tenant_id: str) -> dict[str, int] | None: ...

    async def save_receipt(self, receipt: ErasureReceipt) -> None: ...

    async def list_receipts(
        self, tenant_id: str, *, limit: int = 100, before: str | None = None
    ) -> list[ErasureReceipt]: ...
