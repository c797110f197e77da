"""HTTP models of the operators' routes."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class ErasureReceiptRead(BaseModel):
    """That an erasure happened: who asked, when, how many of each kind went; no content."""

    receipt_id: str
    tenant_id: str
    scope: str = Field(description="`session` or `tenant`.")
    session_id: str | None = Field(description="The erased session (scope `session`).")
    requested_by: str = Field(
        description="Who asked: `key:<prefix>` (a tenant's key), `admin-api`, or what the "
        "operator named on the command line."
    )
    erased_at: datetime
    counts: dict[str, int] = Field(
        description="Rows deleted per table, `sessions_erased` (delegated children included), "
        "`processes_stopped`, and `files` removed from workspaces; zero counts are left out."
    )


class ErasureReceiptList(BaseModel):
    data: list[ErasureReceiptRead]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page.")


class RetentionPolicyWrite(BaseModel):
    """A tenant's retention policy, stored whole."""

    model_config = ConfigDict(extra="forbid")

    idle_days: int | None = Field(
        default=None,
        ge=1,
        le=36_500,
        description="Delete sessions not updated for this many days; null: never for "
        "idleness. A session's own `idle_ttl_seconds` or `expires_at` overrides it.",
    )
    prune: bool = Field(
        default=False,
        description="Prune long ledgers: the events up to the newest snapshot nothing pending "
        "needs are replaced by one HISTORY_PRUNED event.",
    )
    prune_min_events: int = Field(
        default=1000,
        ge=1,
        le=100_000_000,
        description="Prune a session only when at least this many events would go.",
    )


class RetentionPolicyRead(BaseModel):
    tenant_id: str
    idle_days: int | None
    prune: bool
    prune_min_events: int
    stored: bool = Field(
        description="Whether the tenant has a policy of its own; false: the service's "
        "defaults (`ASR_RETENTION_IDLE_DAYS`, no pruning) apply."
    )
    updated_at: datetime | None


class PrunedSession(BaseModel):
    tenant_id: str
    session_id: str
    cut_seq: int = Field(description="The seq the HISTORY_PRUNED marker takes (or would).")
    events_removed: int
    snapshots_removed: int


class RetentionPassRead(BaseModel):
    """What one retention pass did, or in a dry run would do."""

    dry_run: bool
    sessions_deleted: list[dict[str, str]] = Field(
        description="{tenant_id, session_id} of every session deleted (or to be)."
    )
    sessions_pruned: list[PrunedSession]
    events_pruned: int
    snapshots_deleted: int = Field(description="Old snapshots dropped (0 in a dry run).")
    deliveries_deleted: int = Field(description="Settled webhook deliveries dropped (0 dry).")
