"""A fork copies the source's nearest snapshot server-side.

`asr_fork_session` took the child's full state as JSON text (the source's fold, decoded,
folded and encoded again in Python: about 90% of a 20,000-item fork) and wrote it as the
child's `fork` snapshot. Now it copies the source's newest snapshot at or below the fork
point, row to row inside PostgreSQL: the child's events up to that seq are the source's, so
the source's fold there is the child's. The child's load folds the few events after it.
The state parameters are gone, so the old signature is dropped first.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = (
    "asr_fork_session(text, text, bigint, text, jsonb, jsonb, jsonb, timestamptz,"
    " jsonb, text, text, text, text, timestamptz)"
)
_NEW = (
    "asr_fork_session(text, text, bigint, text, jsonb, jsonb, jsonb, timestamptz,"
    " jsonb, text, text, timestamptz)"
)

# The functions' SQL as each migration installed it, kept beside the migrations
# (migrations/sql/<revision>/): never today's app/store/postgres/sql, which the repeatable
# step installs after the last migration (app/store/postgres/install.py).
_FROZEN = Path(__file__).resolve().parents[1] / "sql"


def _sql(revision: str, name: str) -> str:
    return (_FROZEN / revision / f"{name}.sql").read_text()


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP FUNCTION IF EXISTS {_OLD}")
    op.execute(_sql(revision, "fork_session"))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP FUNCTION IF EXISTS {_NEW}")
    op.execute(_sql("0008", "fork_session"))  # the state passed in
