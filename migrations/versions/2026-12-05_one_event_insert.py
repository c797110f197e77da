"""A fork's copy of its source's events moves into `asr_insert_events` (issue #15).

The fork's server-side copy listed the event columns a second time, in `asr_fork_session`:
a new event column had to be added there too, and a missed copy broke only forks, only on
PostgreSQL. `asr_insert_events` now takes the session to copy from (`p_copy_from`,
`p_copy_upto`, defaulted, so its other callers are unchanged), and `insert_events.sql` is the
one PostgreSQL source that lists them. The signature changed, so the old function is
dropped before the sources are installed.

The writers also call `asr_insert_snapshot` and `asr_seal_idempotency` only when there is a
snapshot or a key to record: a PL/pgSQL call that returns at once still cost several
microseconds of an append's server time, and `jsonb_build_object` was built for nothing.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from collections.abc import Sequence

from alembic import op

from app.store.postgres.install import install

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = "asr_insert_events(text, text, bigint, bigint, timestamptz, jsonb)"
_NEW = "asr_insert_events(text, text, bigint, bigint, timestamptz, jsonb, text, bigint)"

# 0013's two functions, for the downgrade.
_PREVIOUS_INSERT = """
CREATE OR REPLACE FUNCTION asr_insert_events(
    p_tenant text, p_session text, p_last_seq bigint, p_xact bigint, p_now timestamptz,
    p_events jsonb
) RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
DECLARE
    n integer := coalesce(jsonb_array_length(p_events), 0);
    v_positions bigint[];
BEGIN
    IF n = 0 THEN
        RETURN '{}';
    END IF;
    WITH inserted AS (
        INSERT INTO session_events AS e (
            tenant_id, session_id, seq, event_id, xact_id, type, run_id, turn_id, payload,
            created_at
        )
        SELECT p_tenant, p_session, p_last_seq - n + u.ord, u.v->>'id', p_xact, u.v->>'type',
               u.v->>'run_id', u.v->>'turn_id', u.v->'payload', p_now
        FROM jsonb_array_elements(p_events) WITH ORDINALITY AS u(v, ord)
        ORDER BY u.ord
        RETURNING e.seq, e.position
    )
    SELECT array_agg(i.position ORDER BY i.seq) INTO v_positions FROM inserted AS i;
    RETURN v_positions;
END
$fn$;
"""

_PREVIOUS_FORK = """
CREATE OR REPLACE FUNCTION asr_fork_session(
    p_tenant text,
    p_source text,
    p_at_seq bigint,
    p_session text,
    p_metadata jsonb,
    p_agent jsonb,
    p_binding jsonb,
    p_now timestamptz,
    p_events jsonb,
    p_idem_key text DEFAULT NULL,
    p_idem_hash text DEFAULT NULL,
    p_idem_expires timestamptz DEFAULT NULL,
    OUT o_session sessions, OUT o_xact_id bigint, OUT o_positions bigint[]
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
DECLARE
    n integer := coalesce(jsonb_array_length(p_events), 0);
    v_source sessions%ROWTYPE;
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant, true);
    SELECT x.* INTO v_source FROM sessions AS x
     WHERE x.tenant_id = p_tenant AND x.session_id = p_source;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no such session' USING ERRCODE = 'AS002';
    END IF;
    IF p_at_seq < 0 OR p_at_seq > v_source.last_seq THEN
        RAISE EXCEPTION '%', v_source.last_seq USING ERRCODE = 'AS007';
    END IF;
    INSERT INTO sessions AS s (
        tenant_id, session_id, root_session_id, parent_session_id, forked_from_seq, status,
        metadata, agent, binding, last_seq, version, active_run_id, created_at, updated_at
    ) VALUES (
        p_tenant, p_session, v_source.root_session_id, p_source, p_at_seq, 'idle',
        p_metadata, p_agent, p_binding, p_at_seq + n, 1, NULL, p_now, p_now
    )
    ON CONFLICT (tenant_id, session_id) DO NOTHING
    RETURNING s.* INTO o_session;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % exists', p_session USING ERRCODE = 'AS008';
    END IF;
    o_xact_id := pg_current_xact_id()::text::bigint;
    INSERT INTO session_events (
        tenant_id, session_id, seq, event_id, xact_id, type, run_id, turn_id, payload,
        created_at
    )
    SELECT e.tenant_id, p_session, e.seq, gen_random_uuid()::text, o_xact_id, e.type,
           e.run_id, e.turn_id, e.payload, e.created_at
      FROM session_events AS e
     WHERE e.tenant_id = p_tenant AND e.session_id = p_source AND e.seq <= p_at_seq
     ORDER BY e.seq;
    o_positions := asr_insert_events(
        p_tenant, p_session, o_session.last_seq, o_xact_id, p_now,
        p_events
    );
    INSERT INTO session_snapshots (tenant_id, session_id, seq, kind, state, state_hash, created_at)
    SELECT p.tenant_id, p_session, p.seq, 'fork', p.state, p.state_hash, p_now
      FROM session_snapshots AS p
     WHERE p.tenant_id = p_tenant AND p.session_id = p_source AND p.seq <= p_at_seq
     ORDER BY p.seq DESC
     LIMIT 1;
    PERFORM asr_seal_idempotency(
        p_tenant, p_idem_key, p_idem_hash, p_now, p_idem_expires,
        jsonb_build_object(
            'session_id', p_session, 'first_seq', p_at_seq + 1,
            'last_seq', o_session.last_seq, 'version', 1
        )
    );
END
$fn$;
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {_OLD}")
        install(op.execute)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {_NEW}")
        op.execute(_PREVIOUS_INSERT)
        op.execute(_PREVIOUS_FORK)
