"""Row-level security without a master key: no tenant value admits every tenant.

0004's policies admitted any row when `app.tenant_id` was `*`, and the app role could set
that itself (`set_config('app.tenant_id', '*', true)`), so neither SQL injected into its
connection nor a compromised app role was contained. Now:

1. `tenant_wall` admits only `tenant_id = current_setting('app.tenant_id', true)`, for every
   role: a transaction sees and writes exactly the one tenant it names, and a transaction
   that names none sees nothing.
2. The work that must span tenants (auth by key prefix, stream key checks, the run
   sweeper, expired Idempotency-Keys, the operators' tenant lookups) is one SECURITY
   DEFINER function each (`migrations/sql/0009/`, see install.py). They run as the role
   running this migration: the tables' owner (or a superuser, who passes anyway).
3. `cross_tenant_*` policies let that role, and it only, read the tables those functions
   read (and delete from `idempotency_keys`), and only while `app.cross_tenant` is `on`:
   each function sets it around its one statement and restores it before returning. The app
   role may set that variable too, but these policies are not for it; and it is no member of
   the owner role, so it cannot `SET ROLE` to it. A service that wrongly connects as the
   owner still gets the tenant wall for a query that forgets its filter.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
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
_WALL = "tenant_id = current_setting('app.tenant_id', true)"
_WILDCARD_WALL = (  # 0004's
    "tenant_id = current_setting('app.tenant_id', true)"
    " OR current_setting('app.tenant_id', true) = '*'"
)
_CROSS_TENANT_ON = "current_setting('app.cross_tenant', true) = 'on'"
# What the cross-tenant functions do, table by table, and nothing more.
CROSS_TENANT_POLICIES = (
    ("tenants", "SELECT"),
    ("api_keys", "SELECT"),
    ("sessions", "SELECT"),
    ("runs", "SELECT"),
    ("idempotency_keys", "SELECT"),
    ("idempotency_keys", "DELETE"),
)
# Source name, and the signature the downgrade drops.
_FUNCTIONS = (
    ("key_by_prefix", "asr_key_by_prefix(text)"),
    ("live_key_prefixes", "asr_live_key_prefixes(text[])"),
    ("tenant_by_name", "asr_tenant_by_name(text)"),
    ("list_tenants", "asr_list_tenants()"),
    ("count_tenants", "asr_count_tenants()"),
    ("stale_runs", "asr_stale_runs(integer)"),
    ("delete_expired_idempotency_keys", "asr_delete_expired_idempotency_keys()"),
)
# The functions' SQL as this migration installed it, kept beside the migrations
# (migrations/sql/<revision>/): never today's app/store/postgres/sql, which the repeatable
# step installs after the last migration (app/store/postgres/install.py).
_FROZEN = Path(__file__).resolve().parents[1] / "sql"


def _sql(revision: str, name: str) -> str:
    return (_FROZEN / revision / f"{name}.sql").read_text()


def _policy(command: str) -> str:
    return f"cross_tenant_{command.lower()}"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TENANT_TABLES:
        op.execute(f"ALTER POLICY tenant_wall ON {table} USING ({_WALL}) WITH CHECK ({_WALL})")
    for table, command in CROSS_TENANT_POLICIES:
        op.execute(
            f"CREATE POLICY {_policy(command)} ON {table} FOR {command} TO CURRENT_USER"
            f" USING ({_CROSS_TENANT_ON})"
        )
    # SECURITY DEFINER, so EXECUTE is taken from PUBLIC (a new function grants it).
    for name, signature in _FUNCTIONS:
        op.execute(_sql(revision, name))
        op.execute(f"REVOKE EXECUTE ON FUNCTION {signature} FROM PUBLIC")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for _name, signature in _FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
    for table, command in CROSS_TENANT_POLICIES:
        op.execute(f"DROP POLICY IF EXISTS {_policy(command)} ON {table}")
    for table in TENANT_TABLES:
        op.execute(
            f"ALTER POLICY tenant_wall ON {table}"
            f" USING ({_WILDCARD_WALL}) WITH CHECK ({_WILDCARD_WALL})"
        )
