"""The webhook outbox is filled by `asr_insert_events`, not by a trigger.

Migration 0010 filled `webhook_deliveries` from a statement-level AFTER INSERT trigger on
`session_events` with a transition table. PostgreSQL fills a transition table with every row
the statement inserts, whoever subscribes: a fork's 20,000-row copy wrote 14 MB of it to a
temporary file, and every append paid the trigger's call and its tuplestore (7-18 µs of an
append's 40-60 µs of server time, timed in a PL/pgSQL loop). Since migration 0014 every
event PostgreSQL stores is inserted by `asr_insert_events` (tests/store/test_event_columns.py
fails otherwise), so that function now probes for an active subscription of the tenant after
its insert and, only then, calls `asr_webhook_outbox(tenant, session, first, last)` for the
events it inserted (a fork's copied prefix is never among them). The outbox still commits
exactly with its events. SQLite keeps its row trigger (no transition table there).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TRIGGER = (
    "CREATE TRIGGER webhook_outbox AFTER INSERT ON session_events"
    " REFERENCING NEW TABLE AS asr_new_events"
    " FOR EACH STATEMENT EXECUTE FUNCTION asr_webhook_outbox()"
)

# The functions' SQL as each migration installed it, kept beside the migrations
# (migrations/sql/<revision>/): never today's app/store/postgres/sql, which the repeatable
# step installs after the last migration (app/store/postgres/install.py).
_FROZEN = Path(__file__).resolve().parents[1] / "sql"


def _sql(revision: str, name: str) -> str:
    return (_FROZEN / revision / f"{name}.sql").read_text()


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS webhook_outbox ON session_events")
        op.execute("DROP FUNCTION IF EXISTS asr_webhook_outbox()")
        op.execute(_sql(revision, "insert_events"))
        op.execute(_sql(revision, "webhook_outbox"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS asr_webhook_outbox(text, text, bigint, bigint)")
        op.execute(_sql("0010", "webhook_outbox"))
        op.execute(_sql("0014", "insert_events"))
        op.execute(_TRIGGER)
