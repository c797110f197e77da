"""The run sweeper's query: a partial index of the sessions that hold a run, and a plan
made at each call.

`asr_stale_runs` looked for runs no longer live that still hold their session by joining
every finished run to sessions, with no index on `sessions.active_run_id`; and PL/pgSQL
caches a statement's plan for the life of the connection. In the benchmarks (autovacuum
off, so the tables were never analysed) one call was seen active for 49 s at 16,000 runs,
its backend busy, slowing every request; a plan cached while the tables were small is the
likely cause (the plan itself was not captured). The function now starts from the sessions
that hold a run (this index: a handful of rows however many runs there are) and is planned
at every call (`RETURN QUERY EXECUTE`).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "ix_sessions_tenant_id_active_run_id"
_HOLDS_A_RUN = sa.text("active_run_id IS NOT NULL")

# The functions' SQL as each migration installed it, kept beside the migrations
# (migrations/sql/<revision>/): never today's app/store/postgres/sql, which the repeatable
# step installs after the last migration (app/store/postgres/install.py).
_FROZEN = Path(__file__).resolve().parents[1] / "sql"


def _sql(revision: str, name: str) -> str:
    return (_FROZEN / revision / f"{name}.sql").read_text()


def upgrade() -> None:
    op.create_index(
        _INDEX,
        "sessions",
        ["tenant_id", "active_run_id"],
        postgresql_where=_HOLDS_A_RUN,
        sqlite_where=_HOLDS_A_RUN,
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_sql(revision, "stale_runs"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_sql("0009", "stale_runs"))
    op.drop_index(_INDEX, table_name="sessions")
