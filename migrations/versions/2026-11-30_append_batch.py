"""asr_append_batch: several appends (to any sessions, of any tenants) in one call and one
commit — group commit for concurrent appends (PostgreSQL).

Each item is exactly one call of `asr_append_events` (0006), inside this one transaction:
the tenant scope, the conditional reserve UPDATE of its session row, its events. Items are
applied in (tenant, session, arrival) order, so two batches in flight lock session rows in
the same global order and cannot deadlock, and two appends to one session in a batch apply
in the order they arrived, as if one after the other. An item whose condition fails (seq or
version) or whose session is missing is reported, not raised: it writes nothing and the
other items go on. One row per item comes back, with the same columns as
`asr_append_events` plus `idx`, the item's position in the arrays.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SIGNATURE = (
    "asr_append_batch(text[], text[], bigint[], bigint[], timestamptz[], integer[],"
    " integer[], text[], text[], text[], text[], text[])"
)

_CREATE = """
CREATE FUNCTION asr_append_batch(
    p_tenants text[],
    p_sessions text[],
    p_expected_seqs bigint[],
    p_expected_versions bigint[],
    p_nows timestamptz[],
    p_offsets integer[],
    p_counts integer[],
    p_event_ids text[],
    p_types text[],
    p_run_ids text[],
    p_turn_ids text[],
    p_payloads text[]
) RETURNS TABLE (
    idx integer,
    appended boolean,
    tenant_id varchar,
    session_id varchar,
    root_session_id varchar,
    parent_session_id varchar,
    forked_from_seq bigint,
    status varchar,
    metadata jsonb,
    agent jsonb,
    binding jsonb,
    last_seq bigint,
    version bigint,
    active_run_id varchar,
    created_at timestamptz,
    updated_at timestamptz,
    xact_id bigint,
    positions bigint[]
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
DECLARE
    i integer;
    a integer;
    n integer;
BEGIN
    FOR i IN
        SELECT u.ord FROM unnest(p_tenants, p_sessions) WITH ORDINALITY AS u(t, sid, ord)
        ORDER BY u.t, u.sid, u.ord
    LOOP
        a := p_offsets[i];
        n := p_counts[i];
        RETURN QUERY SELECT i, r.* FROM asr_append_events(
            p_tenants[i], p_sessions[i], p_expected_seqs[i], p_expected_versions[i],
            p_nows[i], p_event_ids[a + 1 : a + n], p_types[a + 1 : a + n],
            p_run_ids[a + 1 : a + n], p_turn_ids[a + 1 : a + n], p_payloads[a + 1 : a + n]
        ) AS r;
    END LOOP;
END
$fn$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")
