"""Row-level security on every tenant table (PostgreSQL; SQLite has none).

The application filters every query by tenant; these policies are the second wall, for the
query that forgets. Each transaction of the service names its tenant with
`set_config('app.tenant_id', <tenant>, true)` (SET LOCAL), and a row is visible or
writable only when its `tenant_id` is that tenant. A transaction that names no tenant sees
no rows. System work that must span tenants (auth by key prefix, the run sweeper, operator
commands) names the tenant `*`.

FORCE makes the policies bind the tables' owner too. Superusers and BYPASSRLS roles still
pass, which is why the service should connect as a role that is neither (README, Security).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TENANT_TABLES = (
    "tenants",
    "api_keys",
    "sessions",
    "session_events",
    "session_snapshots",
    "runs",
    "idempotency_keys",
)
POLICY = "tenant_wall"
_RULE = (
    "tenant_id = current_setting('app.tenant_id', true)"
    " OR current_setting('app.tenant_id', true) = '*'"
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TENANT_TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY {POLICY} ON {table} USING ({_RULE}) WITH CHECK ({_RULE})")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TENANT_TABLES:
        op.execute(f"DROP POLICY IF EXISTS {POLICY} ON {table}")
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
