"""Erasure receipts: a row per erasure (a session, or a whole tenant) saying who asked, when,
and how many rows and files of each kind went; no content.

`erasure_receipts` has no foreign key to `tenants`: the receipt of a tenant's erasure is what
is left of the tenant. It carries `tenant_id` and gets the tenant wall of migration 0009
(FORCE ROW LEVEL SECURITY), so an operator reads a tenant's receipts in that tenant's scope.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-08
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)
_WALL = "tenant_id = current_setting('app.tenant_id', true)"


def upgrade() -> None:
    op.create_table(
        "erasure_receipts",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("receipt_id", sa.String(length=64), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=True),
        sa.Column("requested_by", sa.String(length=128), nullable=False),
        sa.Column("erased_at", TIMESTAMP, nullable=False),
        sa.Column("counts", JSON, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "receipt_id", name=op.f("pk_erasure_receipts")),
    )
    op.create_index(
        op.f("ix_erasure_receipts_tenant_id_erased_at"),
        "erasure_receipts",
        ["tenant_id", "erased_at"],
    )
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE erasure_receipts ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE erasure_receipts FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY tenant_wall ON erasure_receipts USING ({_WALL}) WITH CHECK ({_WALL})"
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_erasure_receipts_tenant_id_erased_at"), table_name="erasure_receipts")
    op.drop_table("erasure_receipts")
