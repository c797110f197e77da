"""Shardable keys: every unique constraint of a tenant's table leads with `tenant_id`.

A table distributed by tenant (Citus and its kind) can enforce a unique constraint only when
it contains the distribution column: each shard checks its own rows. Two constraints of the
ledger and one of the webhook outbox did not:

- `session_events` UNIQUE(event_id) becomes UNIQUE(tenant_id, event_id): the append that
  skips a batch re-sent after a lost reply looks its first event id up within its tenant
  (`asr_append_events`), so one tenant's ids can no longer collide with another's either;
- `session_events` UNIQUE(position) becomes UNIQUE(tenant_id, position), whose index takes
  the place of the plain index on (tenant_id, position) the tenant-wide timeline read;
- `webhook_deliveries` UNIQUE(webhook_id, event_id) becomes UNIQUE(tenant_id, webhook_id,
  event_id).

`tenants` and `api_keys` keep their global keys (name, prefix): they are the directory,
read before a tenant is known, and would be reference tables (`docs/how-to/scale-out.md`).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-09
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _sqlite_triggers() -> list[str]:
    """SQLite: the triggers on the two tables (the webhook outbox's, migration 0012), dropped
    here (a batch operation's copy-and-rename drops them with the old table, and a trigger
    naming the other table makes its rename fail) and put back by the caller after it."""
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return []
    rows = bind.execute(
        sa.text(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
            " AND tbl_name IN ('session_events', 'webhook_deliveries')"
        )
    ).all()
    for name, _sql in rows:
        op.execute(f'DROP TRIGGER "{name}"')
    return [sql for _name, sql in rows]


def upgrade() -> None:
    triggers = _sqlite_triggers()
    with op.batch_alter_table("session_events") as batch:
        batch.drop_constraint(op.f("uq_session_events_event_id"), type_="unique")
        batch.drop_constraint(op.f("uq_session_events_position"), type_="unique")
        batch.drop_index(op.f("ix_session_events_tenant_id_position"))
        batch.create_unique_constraint(
            op.f("uq_session_events_tenant_id_event_id"), ["tenant_id", "event_id"]
        )
        batch.create_unique_constraint(
            op.f("uq_session_events_tenant_id_position"), ["tenant_id", "position"]
        )
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.drop_constraint(op.f("uq_webhook_deliveries_webhook_id_event_id"), type_="unique")
        batch.create_unique_constraint(
            op.f("uq_webhook_deliveries_tenant_id_webhook_id_event_id"),
            ["tenant_id", "webhook_id", "event_id"],
        )
    for trigger in triggers:
        op.execute(trigger)


def downgrade() -> None:
    triggers = _sqlite_triggers()
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.drop_constraint(
            op.f("uq_webhook_deliveries_tenant_id_webhook_id_event_id"), type_="unique"
        )
        batch.create_unique_constraint(
            op.f("uq_webhook_deliveries_webhook_id_event_id"), ["webhook_id", "event_id"]
        )
    with op.batch_alter_table("session_events") as batch:
        batch.drop_constraint(op.f("uq_session_events_tenant_id_position"), type_="unique")
        batch.drop_constraint(op.f("uq_session_events_tenant_id_event_id"), type_="unique")
        batch.create_index(op.f("ix_session_events_tenant_id_position"), ["tenant_id", "position"])
        batch.create_unique_constraint(op.f("uq_session_events_position"), ["position"])
        batch.create_unique_constraint(op.f("uq_session_events_event_id"), ["event_id"])
    for trigger in triggers:
        op.execute(trigger)
