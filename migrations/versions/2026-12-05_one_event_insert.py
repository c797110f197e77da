"""A fork's copy of its source's events moves into `asr_insert_events`.

The fork's server-side copy listed the event columns a second time, in `asr_fork_session`:
a new event column had to be added there too, and a missed copy broke only forks, only on
PostgreSQL. `asr_insert_events` now takes the session to copy from (`p_copy_from`,
`p_copy_upto`, defaulted, so its other callers are unchanged), and `insert_events.sql` is the
one PostgreSQL source that lists them. The signature changed, so the old function is
dropped first.

The writers also call `asr_insert_snapshot` and `asr_seal_idempotency` only when there is a
snapshot or a key to record: a PL/pgSQL call that returns at once still cost several
microseconds of an append's server time, and `jsonb_build_object` was built for nothing.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = "asr_insert_events(text, text, bigint, bigint, timestamptz, jsonb)"
_NEW = "asr_insert_events(text, text, bigint, bigint, timestamptz, jsonb, text, bigint)"
_SOURCES = ("insert_events", "create_session", "fork_session", "append_events", "run_start")
# For the downgrade: the migration whose text of each function this one replaced.
_PREVIOUS = {
    "insert_events": "0008",
    "create_session": "0008",
    "fork_session": "0012",
    "append_events": "0010",
    "run_start": "0008",
}

# The functions' SQL as each migration installed it, kept beside the migrations
# (migrations/sql/<revision>/): never today's app/store/postgres/sql, which the repeatable
# step installs after the last migration (app/store/postgres/install.py).
_FROZEN = Path(__file__).resolve().parents[1] / "sql"


def _sql(revision: str, name: str) -> str:
    return (_FROZEN / revision / f"{name}.sql").read_text()


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {_OLD}")
        for name in _SOURCES:
            op.execute(_sql(revision, name))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {_NEW}")
        for name, previous in _PREVIOUS.items():
            op.execute(_sql(previous, name))
