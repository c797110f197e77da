"""asr_append_batch: several appends (to any sessions, of any tenants) in one call and one
commit — group commit for concurrent appends (PostgreSQL).

Each item is exactly one `asr_append_events` (0006): the tenant scope, the conditional
reserve UPDATE of its session row, its events (0005's `asr_insert_events`). Items are
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
#variable_conflict use_column
DECLARE
    i integer;
    n integer;
    a integer;
    s sessions%ROWTYPE;
    v_xact bigint := pg_current_xact_id()::text::bigint;
    v_positions bigint[];
BEGIN
    FOR i IN
        SELECT u.ord FROM unnest(p_tenants, p_sessions) WITH ORDINALITY AS u(t, sid, ord)
        ORDER BY u.t, u.sid, u.ord
    LOOP
        PERFORM set_config('app.tenant_id', p_tenants[i], true);
        n := p_counts[i];
        a := p_offsets[i];
        UPDATE sessions AS x
           SET last_seq = x.last_seq + n, version = x.version + 1, updated_at = p_nows[i]
         WHERE x.tenant_id = p_tenants[i] AND x.session_id = p_sessions[i]
           AND (p_expected_seqs[i] IS NULL OR x.last_seq = p_expected_seqs[i])
           AND (p_expected_versions[i] IS NULL OR x.version = p_expected_versions[i])
        RETURNING x.* INTO s;
        IF NOT FOUND THEN
            SELECT x.* INTO s FROM sessions AS x
             WHERE x.tenant_id = p_tenants[i] AND x.session_id = p_sessions[i];
            IF FOUND THEN
                RETURN QUERY SELECT i, false, s.tenant_id, s.session_id, s.root_session_id,
                    s.parent_session_id, s.forked_from_seq, s.status, s.metadata, s.agent,
                    s.binding, s.last_seq, s.version, s.active_run_id, s.created_at,
                    s.updated_at, NULL::bigint, NULL::bigint[];
            END IF;
            CONTINUE;
        END IF;
        v_positions := asr_insert_events(
            p_tenants[i], p_sessions[i], s.last_seq, v_xact, p_nows[i],
            p_event_ids[a + 1 : a + n], p_types[a + 1 : a + n], p_run_ids[a + 1 : a + n],
            p_turn_ids[a + 1 : a + n], p_payloads[a + 1 : a + n]
        );
        RETURN QUERY SELECT i, true, s.tenant_id, s.session_id, s.root_session_id,
            s.parent_session_id, s.forked_from_seq, s.status, s.metadata, s.agent, s.binding,
            s.last_seq, s.version, s.active_run_id, s.created_at, s.updated_at,
            v_xact, v_positions;
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
