"""The run sweeper's query: a partial index of the sessions that hold a run, and a plan
made at each call (issue #21's benchmarks).

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

import sqlalchemy as sa
from alembic import op

from app.store.postgres.install import install

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "ix_sessions_tenant_id_active_run_id"
_HOLDS_A_RUN = sa.text("active_run_id IS NOT NULL")

# 0009's sweeper query, for the downgrade.
_PREVIOUS = """
CREATE OR REPLACE FUNCTION asr_stale_runs(p_limit integer) RETURNS SETOF runs
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
DECLARE
    was text := current_setting('app.cross_tenant', true);
BEGIN
    PERFORM set_config('app.cross_tenant', 'on', true);
    RETURN QUERY
        (SELECT r.* FROM runs AS r
          WHERE r.status IN ('queued', 'running') AND r.lease_expires_at < now()
          LIMIT p_limit)
        UNION ALL
        (SELECT r.* FROM runs AS r
           JOIN sessions AS s ON s.tenant_id = r.tenant_id AND s.active_run_id = r.run_id
          WHERE r.status NOT IN ('queued', 'running')
          LIMIT p_limit);
    PERFORM set_config('app.cross_tenant', coalesce(was, ''), true);
END
$fn$;
"""


def upgrade() -> None:
    op.create_index(
        _INDEX,
        "sessions",
        ["tenant_id", "active_run_id"],
        postgresql_where=_HOLDS_A_RUN,
        sqlite_where=_HOLDS_A_RUN,
    )
    if op.get_bind().dialect.name == "postgresql":
        install(op.execute)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PREVIOUS)
    op.drop_index(_INDEX, table_name="sessions")
