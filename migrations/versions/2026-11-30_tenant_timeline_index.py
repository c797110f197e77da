"""Index for the tenant-wide timeline: session_events (tenant_id, xact_id, position).

The tenant stream reads a tenant's events in (xact_id, position) order after a cursor, and
only rows whose transaction is older than every running one (DESIGN section 9).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        op.f("ix_session_events_tenant_id_xact_id_position"),
        "session_events",
        ["tenant_id", "xact_id", "position"],
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_session_events_tenant_id_xact_id_position"), table_name="session_events")
