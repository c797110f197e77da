"""Exactly-once writes: the Idempotency-Key row commits with the work it guards.

`idempotency_keys` loses the claim columns (`state`, `locked_until`): a key row now exists
only once the work it guards has committed, written in that same transaction with `result`
(what the work committed: session, seq range, version, run), so there is no claim that a
crash could leave behind. The response is stored beside it when it has been rendered.

PostgreSQL: every write that inserts events is one stored function, installed from its
source as it was then (`migrations/sql/0008/`): create, fork and claim/close of a run join
the appends and run steps of 0005-0007; every one of them that a request drives takes the key
(named parameters with defaults), and an append skips itself when its first event id is
already in the ledger (a write token: a batch re-sent after a lost reply applies nothing
twice). The functions of 0005-0007 whose signature changed are dropped first.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SOURCES = (
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

_OLD = (
    "asr_append_batch(text[], text[], bigint[], bigint[], timestamptz[], integer[],"
    " integer[], text[], text[], text[], text[], text[])",
    "asr_append_events(text, text, bigint, bigint, timestamptz,"
    " text[], text[], text[], text[], text[])",
    "asr_run_start(text, text, text, integer, timestamptz, text, timestamptz, jsonb, jsonb,"
    " text, bigint, timestamptz, text[], text[], text[], text[], text[])",
    "asr_run_step(text, text, text, integer, timestamptz, timestamptz, integer, jsonb,"
    " boolean, text, text, text, jsonb, text[], text[], text[], text[], text[])",
    "asr_insert_events(text, text, bigint, bigint, timestamptz,"
    " text[], text[], text[], text[], text[])",
)
_NEW = (
    "asr_append_batch(text[], text[], bigint[], bigint[], timestamptz[], text[], text[],"
    " text[], timestamptz[], text[], text[], text[], text[])",
    "asr_append_events(text, text, bigint, bigint, timestamptz, jsonb, text, text,"
    " timestamptz, jsonb, text, text, text)",
    "asr_run_start(text, text, text, integer, timestamptz, text, timestamptz, jsonb, jsonb,"
    " bigint, timestamptz, jsonb, text, text, timestamptz)",
    "asr_run_step(text, text, text, integer, timestamptz, timestamptz, integer, jsonb,"
    " boolean, text, text, text, jsonb, jsonb)",
    "asr_insert_events(text, text, bigint, bigint, timestamptz, jsonb)",
    "asr_seal_idempotency(text, text, text, timestamptz, timestamptz, jsonb)",
    "asr_insert_snapshot(text, text, bigint, text, text, text, timestamptz)",
    "asr_create_session(text, text, text, text, bigint, jsonb, jsonb, jsonb, timestamptz,"
    " jsonb, text, text, text, text, text, timestamptz)",
    "asr_fork_session(text, text, bigint, text, jsonb, jsonb, jsonb, timestamptz,"
    " jsonb, text, text, text, text, timestamptz)",
    "asr_run_claim(text, text, text, timestamptz, timestamptz, boolean, jsonb)",
    "asr_run_close(text, text, timestamptz, jsonb)",
)

# The functions' SQL as this migration installed it, kept beside the migrations
# (migrations/sql/<revision>/): never today's app/store/postgres/sql, which the repeatable
# step installs after the last migration (app/store/postgres/install.py).
_FROZEN = Path(__file__).resolve().parents[1] / "sql"


def _sql(revision: str, name: str) -> str:
    return (_FROZEN / revision / f"{name}.sql").read_text()


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.execute("DELETE FROM idempotency_keys WHERE response IS NULL")  # old unfinished claims
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.add_column(sa.Column("result", _json(), nullable=True))
        batch.drop_column("state")
        batch.drop_column("locked_until")
    if op.get_bind().dialect.name != "postgresql":
        return
    for signature in _OLD:
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
    for name in _SOURCES:
        op.execute(_sql(revision, name))


def _previous(filename: str) -> Any:
    """An earlier migration module, for its CREATE statements (they have no import name)."""
    path = Path(__file__).with_name(filename)
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for signature in _NEW:
            op.execute(f"DROP FUNCTION IF EXISTS {signature}")
        run_functions = _previous("2026-11-30_run_functions.py")
        for name in ("RUN_START", "RUN_STEP", "SESSION_TAIL", "INSERT_EVENTS"):
            create = getattr(run_functions, name)
            op.execute(create.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
        op.execute(_previous("2026-11-30_append_function.py")._CREATE)
        op.execute(_previous("2026-11-30_append_batch.py")._CREATE)
    op.execute("DELETE FROM idempotency_keys")
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.drop_column("result")
        batch.add_column(sa.Column("state", sa.String(16), nullable=False, server_default="done"))
        batch.add_column(
            sa.Column(
                "locked_until",
                sa.DateTime(timezone=True),
                nullable=False,
                server_default=sa.func.now(),
            )
        )
