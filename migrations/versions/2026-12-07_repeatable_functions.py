"""The stored functions' current sources are installed by a repeatable step (PostgreSQL).

Until now every migration that touched a function installed today's `app/store/postgres/sql`,
so editing a source changed what old migrations did. Migrations 0008-0015 now install the
text they were written with (`migrations/sql/<revision>/`), and after the last migration of
an upgrade to head the repeatable step (`app/store/postgres/install.py`, run by
`migrations/env.py`) installs each current source whose checksum differs from the one this
table records, and records it.

`asr_repeatable` holds one row per source: its name, the SHA-256 of its text, when it was
installed. It is the migrations' bookkeeping, like `alembic_version`, not a model of
`app.store.tables` (env.py leaves it out of `alembic check`). Row-level security is enabled
with no policy, so a role that is not the owner (the app role, through roles.sql's default
privileges) sees and changes no row of it. SQLite has no stored functions and no table.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_table(
        "asr_repeatable",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("checksum", sa.String(length=64), nullable=False),
        sa.Column(
            "installed_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_asr_repeatable")),
    )
    op.execute("ALTER TABLE asr_repeatable ENABLE ROW LEVEL SECURITY")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_table("asr_repeatable")
