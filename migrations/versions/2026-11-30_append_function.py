"""asr_append_events: a whole append (PostgreSQL) in one statement, so one round trip.

An append through SQLAlchemy is five round trips: BEGIN, the tenant scope, the reserve
UPDATE, the INSERT, COMMIT. This function does the same steps, in the same order and under
the same locks, inside one call; run outside an explicit transaction it is its own
transaction, so the append costs one round trip and one commit.

1. `set_config('app.tenant_id', p_tenant, true)`: the row-level policies of 0004 bind it.
   The function is SECURITY INVOKER (the default, said out loud): it runs with the caller's
   rights, so the app role stays walled in exactly as with plain statements.
2. The reserve UPDATE of the session row (last_seq += n, version += 1, updated_at), only
   when the expected seq / version match (NULL: no condition). It takes the row lock, so
   concurrent appends to one session queue here and seqs come out gapless.
3. No row updated: the function reads the row (same transaction) and returns it with
   `appended` false, so the caller can tell a conflict from a missing session (no row) with
   no second round trip.
4. The INSERT of the events (0005's `asr_insert_events`) with seqs last_seq-n+1 ..
   last_seq, the transaction id of `pg_current_xact_id()` and created_at = p_now; payloads
   arrive as JSON text (encoded once by the caller) and are cast to jsonb there.

Wake-ups are sent by the application after the commit (`app.store.notify`).

Returned: the session row after the update, the xact id, and the events' positions in seq
order. Functions are executable by PUBLIC unless revoked; roles.sql also grants EXECUTE to
the app role explicitly.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SIGNATURE = (
    "asr_append_events(text, text, bigint, bigint, timestamptz,"
    " text[], text[], text[], text[], text[])"
)

_CREATE = """
CREATE FUNCTION asr_append_events(
    p_tenant text,
    p_session text,
    p_expected_seq bigint,
    p_expected_version bigint,
    p_now timestamptz,
    p_event_ids text[],
    p_types text[],
    p_run_ids text[],
    p_turn_ids text[],
    p_payloads text[]
) RETURNS TABLE (
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
    n integer := coalesce(cardinality(p_types), 0);
    s sessions%ROWTYPE;
    v_xact bigint;
    v_positions bigint[];
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant, true);

    UPDATE sessions AS x
       SET last_seq = x.last_seq + n, version = x.version + 1, updated_at = p_now
     WHERE x.tenant_id = p_tenant AND x.session_id = p_session
       AND (p_expected_seq IS NULL OR x.last_seq = p_expected_seq)
       AND (p_expected_version IS NULL OR x.version = p_expected_version)
    RETURNING x.* INTO s;

    IF NOT FOUND THEN
        SELECT x.* INTO s FROM sessions AS x
         WHERE x.tenant_id = p_tenant AND x.session_id = p_session;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        RETURN QUERY SELECT false, s.tenant_id, s.session_id, s.root_session_id,
            s.parent_session_id, s.forked_from_seq, s.status, s.metadata, s.agent, s.binding,
            s.last_seq, s.version, s.active_run_id, s.created_at, s.updated_at,
            NULL::bigint, NULL::bigint[];
        RETURN;
    END IF;

    v_xact := pg_current_xact_id()::text::bigint;
    v_positions := asr_insert_events(
        p_tenant, p_session, s.last_seq, v_xact, p_now,
        p_event_ids, p_types, p_run_ids, p_turn_ids, p_payloads
    );

    RETURN QUERY SELECT true, s.tenant_id, s.session_id, s.root_session_id,
        s.parent_session_id, s.forked_from_seq, s.status, s.metadata, s.agent, s.binding,
        s.last_seq, s.version, s.active_run_id, s.created_at, s.updated_at,
        v_xact, v_positions;
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
