"""A webhook's delivery format: what its body looks like, and what the format needs.

`webhook_subscriptions.format` names how a delivery is rendered: `standard` (every existing
subscription; the Standard Webhooks envelope `{type, timestamp, data}`) or `a2a` (an A2A push
notification config: the task as A2A's StreamResponse, rendered at delivery time).
`format_options` holds what the format needs (for `a2a`: the config's task, the client's
verification token and the credentials the receiver asked for); nothing of it is ever
answered by the webhook routes. Both are rows of the tenant, under its wall like the rest of
the table, and go with the subscription when it is erased.

The outbox (the trigger, `asr_webhook_outbox`) is unchanged: it matches as before, and the
deliverer asks the format's renderer whether, and as what, each delivery is sent.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-09
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.add_column(
        "webhook_subscriptions",
        sa.Column("format", sa.String(length=16), nullable=False, server_default="standard"),
    )
    op.add_column("webhook_subscriptions", sa.Column("format_options", JSON, nullable=True))


def downgrade() -> None:
    op.drop_column("webhook_subscriptions", "format_options")
    op.drop_column("webhook_subscriptions", "format")
