"""The stored functions' SQL, kept once, in `sql/*.sql`, and the repeatable step that
installs it.

Each file holds one `CREATE OR REPLACE FUNCTION`. Migrations are frozen: each one that
created or changed a function installs the text it was written with, kept beside it in
`migrations/sql/<revision>/`, never these files. These files are installed by the repeatable
step (`repeatable_step`, Flyway's repeatable migrations): `migrations/env.py` runs it at the
end of every upgrade that reaches head, whoever runs it (`alembic upgrade head`,
`asr migrate`, the tests' harness), in the same transaction. It installs each source whose
SHA-256 differs from the one recorded in `asr_repeatable` (migration 0016), then records it;
an unchanged source is skipped. Any migration step that runs (up or down) may overwrite a
function with a frozen text, so it clears the record, and the next upgrade to head installs
every source again. Editing a function's body is then only an edit of its source; a change
of its signature or result type, which `CREATE OR REPLACE` cannot make, still needs a
migration that drops the old function (its downgrade drops the new one and restores the
previous frozen text). `tests/store/postgres/test_functions.py` checks that the database
holds exactly these sources at head.

Most functions are SECURITY INVOKER: they run with the caller's rights, and the row-level
policies bind the app role inside them as outside. The cross-tenant ones (`CROSS_TENANT`)
are SECURITY DEFINER: they run as the tables' owner, whose policies of migration 0009 let it
read (and, for expired Idempotency-Keys, delete) every tenant's rows only while
`app.cross_tenant` is `on`, which each of them sets around its one statement and restores
before it returns (a non-superuser owner may not put a custom setting in the function's own
`SET` clause). Each pins its `search_path` (pg_temp last, so no temporary table of the
caller's can stand in for one of ours) and does one narrow thing. The step takes EXECUTE on
them away from PUBLIC: only roles granted it (the app role, by the default privileges of
`deploy/postgres/roles.sql`) may call them.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from sqlalchemy import Connection, text

FUNCTIONS_DIR = Path(__file__).with_name("sql")

# Dependency order does not matter to PL/pgSQL (bodies are resolved at call time); this order
# is the reading order: the shared pieces first.
SOURCES = (
    "insert_event_sets",
    "insert_events",
    "insert_snapshot",
    "seal_idempotency",
    "create_session",
    "fork_session",
    "append_fresh",
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

# Migration 0016: one row per source, the checksum of the text installed.
REPEATABLE_TABLE = "asr_repeatable"

_NAME = re.compile(r"CREATE OR REPLACE FUNCTION (\w+)\(")
_BODY = re.compile(r"AS \$fn\$(.*)\$fn\$;", re.S)


def source(name: str, sources: Path | None = None) -> str:
    """Source `name`'s text, from `sources` (default: `FUNCTIONS_DIR`, read at each call)."""
    return ((sources or FUNCTIONS_DIR) / f"{name}.sql").read_text()


def function_name(name: str, sources: Path | None = None) -> str:
    """The SQL name of the function that source `name` creates."""
    found = _NAME.search(source(name, sources))
    if found is None:
        raise ValueError(f"{name}.sql creates no function")
    return found.group(1)


def function_body(name: str, sources: Path | None = None) -> str:
    """The body between the `$fn$` quotes, as PostgreSQL keeps it (`pg_proc.prosrc`)."""
    found = _BODY.search(source(name, sources))
    if found is None:
        raise ValueError(f"{name}.sql has no $fn$-quoted body")
    return found.group(1)


def checksum(sql: str) -> str:
    """What `asr_repeatable` records of a source: the SHA-256 of its text."""
    return hashlib.sha256(sql.encode()).hexdigest()


def statements(name: str, sources: Path | None = None) -> list[str]:
    """What installing source `name` runs: its `CREATE OR REPLACE FUNCTION`, and for a
    cross-tenant function the REVOKE of EXECUTE from PUBLIC (a new function grants it)."""
    create = [source(name, sources)]
    if name not in CROSS_TENANT:
        return create
    return [*create, f"REVOKE EXECUTE ON FUNCTION {function_name(name, sources)} FROM PUBLIC"]


_RECORD = (
    f"INSERT INTO {REPEATABLE_TABLE} (name, checksum, installed_at)"
    " VALUES (:name, :checksum, now())"
    " ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, installed_at = now()"
)


def install_changed(connection: Connection, sources: Path | None = None) -> list[str]:
    """Install every source whose checksum differs from the recorded one, record it, and
    return the names installed (in `SOURCES` order); a recorded name no longer among the
    sources is forgotten (dropping its function is a migration's work)."""
    rows = connection.execute(text(f"SELECT name, checksum FROM {REPEATABLE_TABLE}"))
    recorded = {name: digest for name, digest in rows}
    installed = []
    for name in SOURCES:
        digest = checksum(source(name, sources))
        if recorded.get(name) == digest:
            continue
        for statement in statements(name, sources):
            connection.execute(text(statement))
        connection.execute(text(_RECORD), {"name": name, "checksum": digest})
        installed.append(name)
    gone = sorted(set(recorded) - set(SOURCES))
    if gone:
        connection.execute(
            text(f"DELETE FROM {REPEATABLE_TABLE} WHERE name = ANY(:gone)"), {"gone": gone}
        )
    return installed


def repeatable_step(connection: Connection, *, migrated: bool, at_head: bool) -> list[str]:
    """What `migrations/env.py` runs after the migrations, in their transaction: forget what
    was installed when a migration step ran (it may have put a frozen text in), then, at
    head, `install_changed`. Nothing on SQLite, or below migration 0016 (no record table)."""
    if connection.dialect.name != "postgresql":
        return []
    if connection.execute(text("SELECT to_regclass(:t)"), {"t": REPEATABLE_TABLE}).scalar() is None:
        return []
    if migrated:
        connection.execute(text(f"DELETE FROM {REPEATABLE_TABLE}"))
    return install_changed(connection) if at_head else []


def repeatable_sql() -> list[str]:
    """The step for `alembic upgrade head --sql` (no database to compare with): install every
    source and record it."""
    out = [f"DELETE FROM {REPEATABLE_TABLE}"]
    for name in SOURCES:
        out += statements(name)
        out.append(
            f"INSERT INTO {REPEATABLE_TABLE} (name, checksum, installed_at)"
            f" VALUES ('{name}', '{checksum(source(name))}', now())"
        )
    return out
