"""Every table of the service (docs/ARCHITECTURE.md), in SQLAlchemy Core.

Every key starts with `tenant_id` (api_keys is looked up by its public prefix before the
tenant is known, so its key is `key_id`, with `tenant_id` indexed). JSON columns are JSONB
on PostgreSQL. `counters` exists for SQLite only in practice: SQLite has no identity on a
non-primary-key column, so the store reserves global event positions from it under SQLite's
single writer; PostgreSQL uses the identity column.

Alembic migrations are written from this module but never import it.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

Json = JSON().with_variant(JSONB(), "postgresql")
SnapshotState = JSON().with_variant(Text(), "postgresql")
Timestamp = DateTime(timezone=True)
Id = String(128)

tenants = Table(
    "tenants",
    metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("name", String(128), nullable=False),
    Column("limits", Json, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    PrimaryKeyConstraint("tenant_id"),
    UniqueConstraint("name"),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("key_id", String(64), nullable=False),
    Column("tenant_id", String(64), nullable=False),
    Column("prefix", String(32), nullable=False),
    Column("secret_hash", String(128), nullable=False),
    Column("name", String(128), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("revoked_at", Timestamp, nullable=True),
    PrimaryKeyConstraint("key_id"),
    UniqueConstraint("prefix"),
    ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
    Index(None, "tenant_id"),
)

sessions = Table(
    "sessions",
    metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("session_id", Id, nullable=False),
    Column("root_session_id", Id, nullable=False),
    Column("parent_session_id", Id, nullable=True),
    Column("forked_from_seq", BigInteger, nullable=True),
    Column("status", String(32), nullable=False),
    Column("metadata", Json, nullable=False),
    Column("agent", Json, nullable=False),
    Column("binding", Json, nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("active_run_id", String(64), nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    # The session's own retention (migration 0020): deleted at `expires_at`, or when idle
    # for `idle_ttl_seconds` (over its tenant's policy).
    Column("expires_at", Timestamp, nullable=True),
    Column("idle_ttl_seconds", Integer, nullable=True),
    PrimaryKeyConstraint("tenant_id", "session_id"),
    ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
    # The retention pass's "sessions that expire": only the few that have a time.
    Index(
        None,
        "tenant_id",
        "expires_at",
        postgresql_where=text("expires_at IS NOT NULL"),
        sqlite_where=text("expires_at IS NOT NULL"),
    ),
    # Keyset pagination walks (created_at, session_id) newest first within a tenant.
    Index(None, "tenant_id", "created_at", "session_id"),
    # The run sweeper's "sessions still held by a run": only the few that hold one.
    Index(
        None,
        "tenant_id",
        "active_run_id",
        postgresql_where=text("active_run_id IS NOT NULL"),
        sqlite_where=text("active_run_id IS NOT NULL"),
    ),
)

session_snapshots = Table(
    "session_snapshots",
    metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("session_id", Id, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("kind", String(16), nullable=False),
    # The state's canonical text (the bytes `state_hash` is of, `snapshot_text.py`): TEXT on
    # PostgreSQL (migration 0022; JSONB's text is never canonical, and a load paid for
    # PostgreSQL building it), JSON (text) on SQLite.
    Column("state", SnapshotState, nullable=False),
    Column("state_hash", String(64), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    PrimaryKeyConstraint("tenant_id", "session_id", "seq"),
    ForeignKeyConstraint(
        ["tenant_id", "session_id"],
        ["sessions.tenant_id", "sessions.session_id"],
        ondelete="CASCADE",
    ),
)

session_events = Table(
    "session_events",
    metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("session_id", Id, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("event_id", String(36), nullable=False),
    # Global position for tenant-wide reading. Identity on PostgreSQL; on SQLite the store
    # assigns it from `counters` (one writer at a time, so position order is commit order).
    Column("position", BigInteger, Identity(), nullable=False),
    # The writing transaction's id on PostgreSQL (pg_current_xact_id): tenant-wide readers
    # only pass rows whose transaction is older than every one still running.
    Column("xact_id", BigInteger, nullable=True),
    Column("type", String(64), nullable=False),
    Column("run_id", String(64), nullable=True),
    Column("turn_id", String(64), nullable=True),
    Column("payload", Json, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    PrimaryKeyConstraint("tenant_id", "session_id", "seq"),
    # Both lead with tenant_id, as every key does: a shard checks only its own rows.
    UniqueConstraint("tenant_id", "event_id"),
    # Also the tenant-wide timeline's index, in position order.
    UniqueConstraint("tenant_id", "position"),
    ForeignKeyConstraint(
        ["tenant_id", "session_id"],
        ["sessions.tenant_id", "sessions.session_id"],
        ondelete="CASCADE",
    ),
    # The tenant-wide timeline reads in (xact_id, position) order (PostgreSQL).
    Index(None, "tenant_id", "xact_id", "position"),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("key", String(255), nullable=False),
    Column("request_hash", String(64), nullable=False),
    # What the guarded work committed (session, seq range, version, run), written in the
    # work's own transaction; the rendered response is stored beside it afterwards.
    Column("result", Json, nullable=True),
    Column("status_code", Integer, nullable=True),
    Column("response", LargeBinary, nullable=True),
    Column("headers", Json, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("expires_at", Timestamp, nullable=False),
    PrimaryKeyConstraint("tenant_id", "key"),
    ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
    Index(None, "expires_at"),
)

runs = Table(
    "runs",
    metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("session_id", Id, nullable=False),
    # queued -> running -> finished | failed | interrupted
    Column("status", String(16), nullable=False),
    Column("stop_reason", String(40), nullable=True),
    Column("input", Json, nullable=True),
    Column("options", Json, nullable=False),
    Column("output", Text, nullable=True),
    Column("error", Json, nullable=True),
    Column("usage", Json, nullable=False),
    Column("turns", Integer, nullable=False),
    Column("first_seq", BigInteger, nullable=True),
    Column("last_seq", BigInteger, nullable=True),
    Column("idempotency_key", String(255), nullable=True),
    # Fencing: every write of the run's owner checks (epoch, status = running); a takeover
    # (cancel, lease expiry, interrupt) bumps the epoch, so a paused owner can write nothing.
    Column("epoch", Integer, nullable=False),
    Column("lease_owner", String(128), nullable=True),
    Column("lease_expires_at", Timestamp, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("started_at", Timestamp, nullable=True),
    Column("finished_at", Timestamp, nullable=True),
    Column("updated_at", Timestamp, nullable=False),
    PrimaryKeyConstraint("tenant_id", "run_id"),
    ForeignKeyConstraint(
        ["tenant_id", "session_id"],
        ["sessions.tenant_id", "sessions.session_id"],
        ondelete="CASCADE",
    ),
    Index(None, "tenant_id", "session_id", "created_at"),
    # The sweeper looks for expired leases of live runs on every replica.
    Index(None, "status", "lease_expires_at"),
    # A run's start counts the tenant's live runs (the cap): a range per live status.
    Index(None, "tenant_id", "status"),
)

webhook_subscriptions = Table(
    "webhook_subscriptions",
    metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("webhook_id", String(64), nullable=False),
    Column("url", Text, nullable=False),
    # A JSON list of event types; ["*"] is every type. The outbox triggers match on it.
    Column("event_types", Json, nullable=False),
    Column("session_id", Id, nullable=True),
    # A flat JSON object: a session's metadata must hold each key with exactly this value.
    Column("metadata_filter", Json, nullable=True),
    Column("description", String(256), nullable=True),
    # The Standard Webhooks signing secret (`whsec_<base64>`); never in events, logs or
    # answers other than the creating one.
    Column("secret", String(128), nullable=False),
    # How a delivery is rendered: `standard` (the Standard Webhooks envelope) or `a2a` (an
    # A2A push notification config); `format_options` is what the format needs (for `a2a`:
    # the task, the client's token and credentials). Never answered by the webhook routes.
    Column("format", String(16), nullable=False, server_default="standard"),
    Column("format_options", Json, nullable=True),
    # active | disabled (by the tenant, or by the deliverer after deliveries kept failing)
    Column("state", String(16), nullable=False),
    Column("disabled_reason", String(64), nullable=True),
    Column("consecutive_failures", Integer, nullable=False),
    Column("last_success_at", Timestamp, nullable=True),
    Column("last_failure_at", Timestamp, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    PrimaryKeyConstraint("tenant_id", "webhook_id"),
    ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
    # The outbox triggers ask "has this tenant an active subscription?" on every insert.
    Index(None, "tenant_id", "state"),
)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    # The transactional outbox: one row per (subscription, matching event), written by a
    # trigger on session_events in the transaction of the event (migration 0010).
    Column("tenant_id", String(64), nullable=False),
    Column("webhook_id", String(64), nullable=False),
    Column("session_id", Id, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("event_id", String(36), nullable=False),
    Column("event_type", String(64), nullable=False),
    # pending -> delivered | failed (retries exhausted); redeliver makes it pending again
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", Timestamp, nullable=False),
    # A claim: the replica delivering it, until when (a dead replica's claim lapses).
    Column("claimed_by", String(128), nullable=True),
    Column("claimed_until", Timestamp, nullable=True),
    # When the current round of retries began (the first attempt, or the last redeliver).
    Column("retry_started_at", Timestamp, nullable=True),
    Column("last_attempt_at", Timestamp, nullable=True),
    Column("last_error", String(512), nullable=True),
    Column("response_code", Integer, nullable=True),
    Column("delivered_at", Timestamp, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    # Per subscription and session, in seq order: only the oldest pending row is due.
    PrimaryKeyConstraint("tenant_id", "webhook_id", "session_id", "seq"),
    UniqueConstraint("tenant_id", "webhook_id", "event_id"),
    ForeignKeyConstraint(
        ["tenant_id", "webhook_id"],
        ["webhook_subscriptions.tenant_id", "webhook_subscriptions.webhook_id"],
        ondelete="CASCADE",
    ),
    ForeignKeyConstraint(
        ["tenant_id", "session_id"],
        ["sessions.tenant_id", "sessions.session_id"],
        ondelete="CASCADE",
    ),
    # The delivery log, newest first.
    Index(None, "tenant_id", "webhook_id", "created_at"),
    # The deliverers' work list.
    Index(None, "status", "next_attempt_at"),
)

schedules = Table(
    "schedules",
    metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("schedule_id", String(64), nullable=False),
    # The target: an existing session, or (agent_name) a new session from a blueprint per tick.
    Column("session_id", Id, nullable=True),
    Column("agent_name", String(64), nullable=True),
    Column("input", Json, nullable=True),
    Column("cron", String(128), nullable=True),
    Column("timezone", String(64), nullable=False),
    Column("interval_seconds", Integer, nullable=True),
    Column("anchor_at", Timestamp, nullable=False),
    Column("missed", String(16), nullable=False),  # skip | run_once
    Column("multitask", String(16), nullable=False),  # skip | enqueue | interrupt
    Column("status", String(16), nullable=False),  # active | paused
    Column("metadata", Json, nullable=False),
    Column("next_fire_at", Timestamp, nullable=True),
    # A tick being fired: which (decided once, so a retry fires the same tick with the same
    # Idempotency-Key), by whom, until when; a claim that expires is retried by any replica.
    Column("claim_tick_at", Timestamp, nullable=True),
    Column("claimed_by", String(128), nullable=True),
    Column("claim_expires_at", Timestamp, nullable=True),
    Column("last_fired_at", Timestamp, nullable=True),
    Column("version", Integer, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    PrimaryKeyConstraint("tenant_id", "schedule_id"),
    ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
    # Keyset pagination, newest first.
    Index(None, "tenant_id", "created_at", "schedule_id"),
    # Every replica's scheduler looks for due schedules across tenants.
    Index(None, "status", "next_fire_at"),
)

# What each tick of a schedule did: the run it started (and its session), or why it did not.
schedule_fires = Table(
    "schedule_fires",
    metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("schedule_id", String(64), nullable=False),
    Column("tick_at", Timestamp, nullable=False),
    Column("trigger", String(16), nullable=False),  # schedule | manual
    Column("outcome", String(16), nullable=False),  # started | skipped | failed
    Column("reason", String(64), nullable=True),
    Column("ticks", Integer, nullable=False),  # how many ticks the row stands for (missed ones)
    Column("run_id", String(64), nullable=True),
    Column("session_id", Id, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    PrimaryKeyConstraint("tenant_id", "schedule_id", "tick_at", "trigger"),
    ForeignKeyConstraint(
        ["tenant_id", "schedule_id"],
        ["schedules.tenant_id", "schedules.schedule_id"],
        ondelete="CASCADE",
    ),
)

# What every erasure removed: who asked, when, how many rows and files of each kind. No
# content, and no foreign key: the receipt of a tenant's erasure outlives the tenant.
erasure_receipts = Table(
    "erasure_receipts",
    metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("receipt_id", String(64), nullable=False),
    Column("scope", String(16), nullable=False),  # session | tenant
    Column("session_id", Id, nullable=True),  # the erased session (scope session)
    Column("requested_by", String(128), nullable=False),
    Column("erased_at", Timestamp, nullable=False),
    Column("counts", Json, nullable=False),
    PrimaryKeyConstraint("tenant_id", "receipt_id"),
    Index(None, "tenant_id", "erased_at"),
)

# A tenant's retention policy (migration 0020); its sessions' own overrides are columns of
# `sessions`.
retention_policies = Table(
    "retention_policies",
    metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("idle_days", Integer, nullable=True),
    Column("prune", Boolean, nullable=False, server_default=false()),
    Column("prune_min_events", Integer, nullable=False, server_default="1000"),
    Column("updated_at", Timestamp, nullable=False),
    PrimaryKeyConstraint("tenant_id"),
    ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
)

counters = Table(
    "counters",
    metadata,
    Column("name", String(64), nullable=False),
    Column("value", BigInteger, nullable=False),
    PrimaryKeyConstraint("name"),
)

# Used by docstrings and the RLS migration of a later issue: every table that holds tenant rows.
TENANT_TABLES = (
    "api_keys",
    "sessions",
    "session_snapshots",
    "session_events",
    "idempotency_keys",
    "runs",
    "webhook_subscriptions",
    "webhook_deliveries",
)

# The tables whose keys need not lead with `tenant_id` (`tests/store/test_shard_readiness.py`):
# the directory, read before a tenant is known (a tenant by name, a key by its prefix), which
# a database distributed by tenant keeps whole on every node (a reference table), and the
# bookkeeping of the database itself (SQLite's position counter, the repeatable step's
# checksums, alembic's version), which holds no tenant's rows.
GLOBAL_TABLES = ("tenants", "api_keys", "counters", "asr_repeatable", "alembic_version")

__all__ = [
    "GLOBAL_TABLES",
    "TENANT_TABLES",
    "api_keys",
    "counters",
    "idempotency_keys",
    "metadata",
    "runs",
    "schedule_fires",
    "schedules",
    "session_events",
    "session_snapshots",
    "sessions",
    "tenants",
    "webhook_deliveries",
    "webhook_subscriptions",
]
