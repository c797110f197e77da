"""PostgreSQL stores a snapshot's state as its canonical text (TEXT), as SQLite does.

A snapshot's hash is the SHA-256 of its state's canonical text (sorted keys, compact,
UTF-8). In a JSONB column that text was gone: PostgreSQL kept its own binary form, and a
load had it build JSONB's text (for a 20,000-item memory, 11.5 MB, most of the load's
time), then decoded that, encoded the canonical text again and hashed it. Stored as the
canonical text itself, the row is shipped as it is, and a load hashes the bytes it read
while another thread decodes them (`app/store/snapshot_text.py`). Nothing queries inside
a snapshot's state, so no JSONB operator is lost; a fork still copies the row in SQL.

The ALTER rewrites the table. Rows written before keep JSONB's text (never the canonical
text of a state with a key), and a load checks those the long way, as before. SQLite
already stores text: nothing to do there.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-13
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE session_snapshots ALTER COLUMN state TYPE text USING state::text")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE session_snapshots ALTER COLUMN state TYPE jsonb USING state::jsonb")
