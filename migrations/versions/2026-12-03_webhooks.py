"""Webhooks: subscriptions, and the outbox that triggers fill.

`webhook_subscriptions` holds a tenant's subscriptions (URL, event types, an optional session
or metadata filter, the signing secret, the state). `webhook_deliveries` is the
transactional outbox and the delivery log in one: a trigger on `session_events` inserts one
row per (active subscription, matching event) in the transaction that inserts the event, so
a delivery commits exactly when its event does, whichever writer inserted it, and the
writers themselves are untouched:

- PostgreSQL: a statement-level AFTER INSERT trigger with a transition table
  (`asr_webhook_outbox`, migrations/sql/0010/webhook_outbox.sql), which returns after one
  index probe when the tenant has no active subscription (migration 0015 drops it:
  `asr_insert_events` calls a new `asr_webhook_outbox` after that same probe instead);
- SQLite: an AFTER INSERT row trigger whose WHEN clause is that same probe.

PostgreSQL: both tables get the tenant wall (FORCE ROW LEVEL SECURITY), and the deliverers'
cross-tenant claim (`asr_webhook_claim`, SECURITY DEFINER) the owner's `cross_tenant_*`
policies it needs: reading subscriptions, reading and updating deliveries. The functions
installed since 0009 come with it: `asr_append_events` looks its write token up by event id
alone.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("webhook_subscriptions", "webhook_deliveries")
_WALL = "tenant_id = current_setting('app.tenant_id', true)"
_CROSS_TENANT_ON = "current_setting('app.cross_tenant', true) = 'on'"
CROSS_TENANT_POLICIES = (
    ("webhook_subscriptions", "SELECT"),
    ("webhook_deliveries", "SELECT"),
    ("webhook_deliveries", "UPDATE"),
)
_FUNCTIONS = ("asr_webhook_claim(text, integer, integer)", "asr_webhook_outbox()")

_PG_TRIGGER = (
    "CREATE TRIGGER webhook_outbox AFTER INSERT ON session_events"
    " REFERENCING NEW TABLE AS asr_new_events"
    " FOR EACH STATEMENT EXECUTE FUNCTION asr_webhook_outbox()"
)

# SQLite: `->>` with a label reads that key of the metadata object (3.38+); json_each's
# value and `->>` agree on SQL values (text, integer, real; true is 1).
_SQLITE_TRIGGER = """
CREATE TRIGGER webhook_outbox AFTER INSERT ON session_events
WHEN EXISTS (
    SELECT 1 FROM webhook_subscriptions AS w
    WHERE w.tenant_id = NEW.tenant_id AND w.state = 'active'
)
BEGIN
    INSERT INTO webhook_deliveries (
        tenant_id, webhook_id, session_id, seq, event_id, event_type, status, attempts,
        next_attempt_at, created_at
    )
    SELECT NEW.tenant_id, w.webhook_id, NEW.session_id, NEW.seq, NEW.event_id, NEW.type,
           'pending', 0, NEW.created_at, NEW.created_at
    FROM webhook_subscriptions AS w
    JOIN sessions AS s ON s.tenant_id = NEW.tenant_id AND s.session_id = NEW.session_id
    WHERE w.tenant_id = NEW.tenant_id AND w.state = 'active'
      AND EXISTS (
          SELECT 1 FROM json_each(w.event_types) AS t WHERE t.value IN (NEW.type, '*'))
      AND (w.session_id IS NULL OR w.session_id = NEW.session_id)
      AND (s.forked_from_seq IS NULL OR NEW.seq > s.forked_from_seq)
      AND (w.metadata_filter IS NULL OR NOT EXISTS (
          SELECT 1 FROM json_each(w.metadata_filter) AS f
          WHERE (s.metadata ->> f.key) IS NOT f.value));
END
"""


# The functions' SQL as this migration installed it, kept beside the migrations
# (migrations/sql/<revision>/): never today's app/store/postgres/sql, which the repeatable
# step installs after the last migration (app/store/postgres/install.py).
_FROZEN = Path(__file__).resolve().parents[1] / "sql"


def _sql(revision: str, name: str) -> str:
    return (_FROZEN / revision / f"{name}.sql").read_text()


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "webhook_subscriptions",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("webhook_id", sa.String(64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("event_types", _json(), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=True),
        sa.Column("metadata_filter", _json(), nullable=True),
        sa.Column("description", sa.String(256), nullable=True),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("disabled_reason", sa.String(64), nullable=True),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("last_success_at", _ts(), nullable=True),
        sa.Column("last_failure_at", _ts(), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.tenant_id"],
            name=op.f("fk_webhook_subscriptions_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "webhook_id", name=op.f("pk_webhook_subscriptions")),
    )
    op.create_index(
        op.f("ix_webhook_subscriptions_tenant_id_state"),
        "webhook_subscriptions",
        ["tenant_id", "state"],
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("webhook_id", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("event_type", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", _ts(), nullable=False),
        sa.Column("claimed_by", sa.String(128), nullable=True),
        sa.Column("claimed_until", _ts(), nullable=True),
        sa.Column("retry_started_at", _ts(), nullable=True),
        sa.Column("last_attempt_at", _ts(), nullable=True),
        sa.Column("last_error", sa.String(512), nullable=True),
        sa.Column("response_code", sa.Integer(), nullable=True),
        sa.Column("delivered_at", _ts(), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "webhook_id"],
            ["webhook_subscriptions.tenant_id", "webhook_subscriptions.webhook_id"],
            name=op.f("fk_webhook_deliveries_tenant_id_webhook_subscriptions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "session_id"],
            ["sessions.tenant_id", "sessions.session_id"],
            name=op.f("fk_webhook_deliveries_tenant_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "webhook_id", "session_id", "seq", name=op.f("pk_webhook_deliveries")
        ),
        sa.UniqueConstraint(
            "webhook_id", "event_id", name=op.f("uq_webhook_deliveries_webhook_id_event_id")
        ),
    )
    op.create_index(
        op.f("ix_webhook_deliveries_tenant_id_webhook_id_created_at"),
        "webhook_deliveries",
        ["tenant_id", "webhook_id", "created_at"],
    )
    op.create_index(
        op.f("ix_webhook_deliveries_status_next_attempt_at"),
        "webhook_deliveries",
        ["status", "next_attempt_at"],
    )
    if op.get_bind().dialect.name != "postgresql":
        op.execute(_SQLITE_TRIGGER)
        return
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY tenant_wall ON {table} USING ({_WALL}) WITH CHECK ({_WALL})")
    for table, command in CROSS_TENANT_POLICIES:
        op.execute(
            f"CREATE POLICY cross_tenant_{command.lower()} ON {table} FOR {command}"
            f" TO CURRENT_USER USING ({_CROSS_TENANT_ON})"
        )
    op.execute(_sql(revision, "append_events"))
    op.execute(_sql(revision, "webhook_outbox"))
    op.execute(_sql(revision, "webhook_claim"))
    # SECURITY DEFINER, so EXECUTE is taken from PUBLIC (a new function grants it).
    op.execute("REVOKE EXECUTE ON FUNCTION asr_webhook_claim(text, integer, integer) FROM PUBLIC")
    op.execute(_PG_TRIGGER)


def downgrade() -> None:
    op.execute(
        "DROP TRIGGER IF EXISTS webhook_outbox"
        + (" ON session_events" if op.get_bind().dialect.name == "postgresql" else "")
    )
    if op.get_bind().dialect.name == "postgresql":
        for signature in _FUNCTIONS:
            op.execute(f"DROP FUNCTION IF EXISTS {signature}")
        op.execute(_sql("0008", "append_events"))
    op.drop_index(
        op.f("ix_webhook_deliveries_status_next_attempt_at"), table_name="webhook_deliveries"
    )
    op.drop_index(
        op.f("ix_webhook_deliveries_tenant_id_webhook_id_created_at"),
        table_name="webhook_deliveries",
    )
    op.drop_table("webhook_deliveries")
    op.drop_index(
        op.f("ix_webhook_subscriptions_tenant_id_state"), table_name="webhook_subscriptions"
    )
    op.drop_table("webhook_subscriptions")
