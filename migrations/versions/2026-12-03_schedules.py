"""Schedules: runs started on a cron expression or an interval, exactly once.

`schedules` holds each schedule's target (a session, or a blueprint whose new session each
tick runs on), its cadence, its policies and its next tick, with the claim of a tick being
fired; `schedule_fires` records what every tick did (the run it started, or why not). Both
carry `tenant_id` and get the tenant wall of migration 0009.

PostgreSQL: every replica's scheduler finds due schedules across tenants through one
SECURITY DEFINER function, `asr_due_schedules` (migrations/sql/0011/due_schedules.sql),
which reads `schedules` through the owner-only `cross_tenant_select` policy; claiming and
recording a tick are written in the tenant's own transaction.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)
_WALL = "tenant_id = current_setting('app.tenant_id', true)"
_CROSS_TENANT_ON = "current_setting('app.cross_tenant', true) = 'on'"


# The function's SQL as this migration installed it, kept beside the migrations
# (migrations/sql/<revision>/): never today's app/store/postgres/sql, which the repeatable
# step installs after the last migration (app/store/postgres/install.py).
_FROZEN = Path(__file__).resolve().parents[1] / "sql"


def _sql(revision: str, name: str) -> str:
    return (_FROZEN / revision / f"{name}.sql").read_text()


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("schedule_id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=True),
        sa.Column("agent_name", sa.String(length=64), nullable=True),
        sa.Column("input", JSON, nullable=True),
        sa.Column("cron", sa.String(length=128), nullable=True),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("interval_seconds", sa.Integer(), nullable=True),
        sa.Column("anchor_at", TIMESTAMP, nullable=False),
        sa.Column("missed", sa.String(length=16), nullable=False),
        sa.Column("multitask", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("next_fire_at", TIMESTAMP, nullable=True),
        sa.Column("claim_tick_at", TIMESTAMP, nullable=True),
        sa.Column("claimed_by", sa.String(length=128), nullable=True),
        sa.Column("claim_expires_at", TIMESTAMP, nullable=True),
        sa.Column("last_fired_at", TIMESTAMP, nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.tenant_id"],
            name=op.f("fk_schedules_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "schedule_id", name=op.f("pk_schedules")),
    )
    op.create_index(
        op.f("ix_schedules_tenant_id_created_at_schedule_id"),
        "schedules",
        ["tenant_id", "created_at", "schedule_id"],
    )
    op.create_index(
        op.f("ix_schedules_status_next_fire_at"), "schedules", ["status", "next_fire_at"]
    )
    op.create_table(
        "schedule_fires",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("schedule_id", sa.String(length=64), nullable=False),
        sa.Column("tick_at", TIMESTAMP, nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column("ticks", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("session_id", sa.String(length=128), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "schedule_id"],
            ["schedules.tenant_id", "schedules.schedule_id"],
            name=op.f("fk_schedule_fires_tenant_id_schedules"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "schedule_id", "tick_at", "trigger", name=op.f("pk_schedule_fires")
        ),
    )
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in ("schedules", "schedule_fires"):
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY tenant_wall ON {table} USING ({_WALL}) WITH CHECK ({_WALL})")
    op.execute(
        "CREATE POLICY cross_tenant_select ON schedules FOR SELECT TO CURRENT_USER"
        f" USING ({_CROSS_TENANT_ON})"
    )
    op.execute(_sql(revision, "due_schedules"))
    # SECURITY DEFINER, so EXECUTE is taken from PUBLIC (a new function grants it).
    op.execute("REVOKE EXECUTE ON FUNCTION asr_due_schedules(integer) FROM PUBLIC")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS asr_due_schedules(integer)")
    op.drop_table("schedule_fires")
    op.drop_index(op.f("ix_schedules_status_next_fire_at"), table_name="schedules")
    op.drop_index(op.f("ix_schedules_tenant_id_created_at_schedule_id"), table_name="schedules")
    op.drop_table("schedules")
