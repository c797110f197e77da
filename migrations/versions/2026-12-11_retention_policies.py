"""Retention policies as data: a tenant's policy, and a session's own expiry and idle TTL.

`retention_policies` holds at most one row per tenant: delete its sessions idle for more
than `idle_days` (NULL: never for idleness), and prune their ledgers (`prune`, when at
least `prune_min_events` events would go). `sessions.expires_at` (delete at that time) and
`sessions.idle_ttl_seconds` (idle TTL of this session, over the tenant's `idle_days`) are a
session's own overrides, set at create or by PATCH; being columns of the session, they go
with it. The policy table carries `tenant_id` and gets the tenant wall of migration 0009
(FORCE ROW LEVEL SECURITY), and goes with its tenant.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-09
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)
_WALL = "tenant_id = current_setting('app.tenant_id', true)"
_EXPIRING = "expires_at IS NOT NULL"


def upgrade() -> None:
    op.create_table(
        "retention_policies",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("idle_days", sa.Integer(), nullable=True),
        sa.Column("prune", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("prune_min_events", sa.Integer(), nullable=False, server_default="1000"),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.tenant_id"],
            name=op.f("fk_retention_policies_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_retention_policies")),
    )
    op.add_column("sessions", sa.Column("expires_at", TIMESTAMP, nullable=True))
    op.add_column("sessions", sa.Column("idle_ttl_seconds", sa.Integer(), nullable=True))
    op.create_index(
        op.f("ix_sessions_tenant_id_expires_at"),
        "sessions",
        ["tenant_id", "expires_at"],
        postgresql_where=sa.text(_EXPIRING),
        sqlite_where=sa.text(_EXPIRING),
    )
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE retention_policies ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE retention_policies FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY tenant_wall ON retention_policies USING ({_WALL}) WITH CHECK ({_WALL})"
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_sessions_tenant_id_expires_at"), table_name="sessions")
    # SQLite (3.35+) drops a column that no index, key or trigger uses in place.
    op.drop_column("sessions", "idle_ttl_seconds")
    op.drop_column("sessions", "expires_at")
    op.drop_table("retention_policies")
