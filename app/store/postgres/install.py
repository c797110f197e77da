"""The stored functions' SQL, kept once, in `sql/*.sql`, and installed by migrations.

Each file holds one `CREATE OR REPLACE FUNCTION`. A migration that changes any of them calls
`install` (after dropping a function whose signature or result type changed, which `CREATE
OR REPLACE` cannot do), so the database always holds exactly these sources at head; the
test `tests/store/test_pg_functions.py` compares what the database holds with them.
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
)

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
    """Run every source through `execute` (e.g. Alembic's `op.execute`)."""
    for name in SOURCES:
        execute(source(name))
