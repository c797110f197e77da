"""The records the runtime and the stores exchange: rows as frozen dataclasses, and what
the runtime hands a store to write (`NewSession`, `NewRun`, `RunFinish`, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.runtime.session.events import Event


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
    # The session's own retention: deleted at this time / when idle this long.
    expires_at: datetime | None = None
    idle_ttl_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class TenantRetention:
    """A tenant's retention policy (`retention_policies`): delete sessions idle for more than
    `idle_days` (None: never for idleness), and prune ledgers when `prune` and at least
    `prune_min_events` events would go."""

    idle_days: int | None = None
    prune: bool = False
    prune_min_events: int = 1000
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    session_id: str
    seq: int
    kind: str
    state: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class PruneFacts:
    """What a prune decides on, read under the session's row lock (`LedgerPort.prune_session`).

    `history_start`: the seq of the ledger's first event (1 if never pruned; a fork's own
    first seq is 1 too). `marker`: the payload of the HISTORY_PRUNED event at
    `history_start`, if the ledger starts with one. `run_first_seq`: the first seq of the
    session's active run, if it has one. `snapshots`: (seq, state) of intact snapshots below
    that run's first seq (below `last_seq + 1` without one), newest first, at most a few.
    """

    session: SessionRecord
    history_start: int
    marker: dict[str, Any] | None
    run_first_seq: int | None
    snapshots: list[tuple[int, dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class PruneOutcome:
    """What one prune did (or, in a dry run, would do): `cut_seq` is the seq the marker
    took (None: nothing pruned, `reason` says why); events and snapshots removed."""

    session_id: str
    cut_seq: int | None
    events_removed: int
    snapshots_removed: int
    reason: str
    dry_run: bool = False


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
    cursor only ever moves over a prefix that can no longer change. On
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


@dataclass(frozen=True, slots=True)
class ErasureReceipt:
    """The record that an erasure happened: who asked, when, how many of each kind went.

    It holds no content (the erased session's id is its only subject), and it is kept after
    the tenant itself is gone: it is what an operator shows for an erasure request.
    """

    receipt_id: str
    tenant_id: str
    scope: str  # session | tenant
    session_id: str | None
    requested_by: str
    erased_at: datetime
    counts: dict[str, int]
