"""The stored functions' SQL, kept once, in `sql/*.sql`, and installed by migrations.

Each file holds one `CREATE OR REPLACE FUNCTION`. A migration that changes any of them calls
`install` (after dropping a function whose signature or result type changed, which `CREATE
OR REPLACE` cannot do), so the database always holds exactly these sources at head; the
test `tests/store/postgres/test_functions.py` compares what the database holds with them.

Most functions are SECURITY INVOKER: they run with the caller's rights, and the row-level
policies bind the app role inside them as outside. The cross-tenant ones (`CROSS_TENANT`)
are SECURITY DEFINER: they run as the tables' owner, whose policies of migration 0009 let it
read (and, for expired Idempotency-Keys, delete) every tenant's rows only while
`app.cross_tenant` is `on`, which each of them sets around its one statement and restores
before it returns (a non-superuser owner may not put a custom setting in the function's own
`SET` clause). Each pins its `search_path` (pg_temp last, so no temporary table of the
caller's can stand in for one of ours) and does one narrow thing. `install` takes EXECUTE on
them away from PUBLIC: only roles granted it (the app role, by the default privileges of
`deploy/postgres/roles.sql`) may call them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

FUNCTIONS_DIR = Path(__file__).with_name("sql")

# Dependency order does not matter to PL/pgSQL (bodies are resolved at call time); this order
# is the reading order: the shared pieces first.
SOURCES = (
    "insert_events",
    "insert_snapshot",
    "seal_idempotency",
    "create_session",
    "fork_session",
    "append_events",
    "append_batch",
    "session_tail",
    "run_start",
    "run_claim",
    "run_step",
    "run_close",
    "webhook_outbox",
    # Cross-tenant, SECURITY DEFINER (above).
    "key_by_prefix",
    "live_key_prefixes",
    "tenant_by_name",
    "list_tenants",
    "count_tenants",
    "stale_runs",
    "delete_expired_idempotency_keys",
    "webhook_claim",
    "due_schedules",
)
CROSS_TENANT = SOURCES[SOURCES.index("key_by_prefix") :]

_NAME = re.compile(r"CREATE OR REPLACE FUNCTION (\w+)\(")
_BODY = re.compile(r"AS \$fn\$(.*)\$fn\$;", re.S)


def source(name: str) -> str:
    return (FUNCTIONS_DIR / f"{name}.sql").read_text()


def function_name(name: str) -> str:
    """The SQL name of the function that source `name` creates."""
    found = _NAME.search(source(name))
    if found is None:
        raise ValueError(f"{name}.sql creates no function")
    return found.group(1)


def function_body(name: str) -> str:
    """The body between the `$fn$` quotes, as PostgreSQL keeps it (`pg_proc.prosrc`)."""
    found = _BODY.search(source(name))
    if found is None:
        raise ValueError(f"{name}.sql has no $fn$-quoted body")
    return found.group(1)


def install(execute: Callable[[str], object]) -> None:
    """Run every source through `execute` (e.g. Alembic's `op.execute`); the cross-tenant
    functions' EXECUTE is then revoked from PUBLIC (a new function grants it)."""
    for name in SOURCES:
        execute(source(name))
    for name in CROSS_TENANT:
        execute(f"REVOKE EXECUTE ON FUNCTION {function_name(name)} FROM PUBLIC")
