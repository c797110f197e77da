"""PostgreSQL functions for a run's writes: one round trip each instead of a transaction of
five or six statements.

`asr_run_start` starts a run (the tenant's live-run cap, the claim of the session with its
seq reservation, the run row, the start events), optionally only if the session is still
the version the caller's cached view holds; `asr_run_step` writes one step of a run
(the seq reservation, freeing the session when the run ends, the fenced update of the run
row, the events). Both scope the transaction to the tenant first, exactly as the
application does (`set_config('app.tenant_id', ..., true)`), and run as the caller
(SECURITY INVOKER), so the row-level policies of 0004 hold inside them as outside. A
refusal is an exception with an `AS0xx` SQLSTATE, which rolls everything back;
`app/store/pgfunctions.py` maps it onto the same errors the SQLAlchemy path raises.

`asr_session_tail` is the read of a session whose state the caller holds up to a seq: the
row and the events after that seq, in one call (None for the events when the held state is
not of this incarnation of the session, or is ahead of it).

`asr_insert_events` is the writers' shared tail: the events with their seqs (payloads arrive
as JSON text, encoded once by the caller). Wake-ups are not sent here: the application sends
them after the commit (`app.store.notify`), so that no writer holds PostgreSQL's global
NOTIFY lock through its commit.

SQLite keeps the SQLAlchemy path (it has no stored procedures and no round trips).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSERT_EVENTS = """
CREATE FUNCTION asr_insert_events(
    p_tenant text, p_session text, p_last_seq bigint, p_xact bigint, p_now timestamptz,
    p_event_ids text[], p_types text[], p_run_ids text[], p_turn_ids text[],
    p_payloads text[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(cardinality(p_event_ids), 0);
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
        SELECT p_tenant, p_session, p_last_seq - n + u.ord, u.event_id, p_xact, u.type,
               u.run_id, u.turn_id, u.payload::jsonb, p_now
        FROM unnest(p_event_ids, p_types, p_run_ids, p_turn_ids, p_payloads)
             WITH ORDINALITY AS u(event_id, type, run_id, turn_id, payload, ord)
        ORDER BY u.ord
        RETURNING e.seq, e.position
    )
    SELECT array_agg(i.position ORDER BY i.seq) INTO v_positions FROM inserted AS i;
    RETURN v_positions;
END
$$
"""

RUN_START = """
CREATE FUNCTION asr_run_start(
    p_tenant text, p_session text, p_run text, p_max_live integer, p_now timestamptz,
    p_owner text, p_lease timestamptz, p_input jsonb, p_options jsonb,
    p_idempotency_key text, p_expected_version bigint, p_expected_created_at timestamptz,
    p_event_ids text[], p_types text[], p_run_ids text[], p_turn_ids text[],
    p_payloads text[],
    OUT o_session sessions, OUT o_run runs, OUT o_xact_id bigint, OUT o_positions bigint[]
) LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(cardinality(p_event_ids), 0);
    v_active text;
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant, true);
    IF p_max_live IS NOT NULL AND (
        SELECT count(*) FROM runs AS r
        WHERE r.tenant_id = p_tenant AND r.status IN ('queued', 'running')
    ) >= p_max_live THEN
        RAISE EXCEPTION 'too many live runs' USING ERRCODE = 'AS001';
    END IF;
    UPDATE sessions AS s
    SET active_run_id = p_run, status = 'running', last_seq = s.last_seq + n,
        version = s.version + 1, updated_at = p_now
    WHERE s.tenant_id = p_tenant AND s.session_id = p_session AND s.active_run_id IS NULL
      AND (p_expected_version IS NULL OR s.version = p_expected_version)
      AND (p_expected_created_at IS NULL OR s.created_at = p_expected_created_at)
    RETURNING s.* INTO o_session;
    IF NOT FOUND THEN
        SELECT s.active_run_id INTO v_active FROM sessions AS s
        WHERE s.tenant_id = p_tenant AND s.session_id = p_session;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no such session' USING ERRCODE = 'AS002';
        END IF;
        IF v_active IS NOT NULL THEN
            RAISE EXCEPTION '%', v_active USING ERRCODE = 'AS003';
        END IF;
        RAISE EXCEPTION 'the session changed since the caller read it' USING ERRCODE = 'AS005';
    END IF;
    o_xact_id := pg_current_xact_id()::text::bigint;
    INSERT INTO runs AS r (
        tenant_id, run_id, session_id, status, input, options, usage, turns, first_seq,
        last_seq, idempotency_key, epoch, lease_owner, lease_expires_at, created_at,
        started_at, updated_at
    ) VALUES (
        p_tenant, p_run, p_session, 'running', p_input, p_options, '{}'::jsonb, 0,
        o_session.last_seq - n + 1, o_session.last_seq, p_idempotency_key, 1, p_owner,
        p_lease, p_now, p_now, p_now
    )
    RETURNING r.* INTO o_run;
    o_positions := asr_insert_events(
        p_tenant, p_session, o_session.last_seq, o_xact_id, p_now,
        p_event_ids, p_types, p_run_ids, p_turn_ids, p_payloads
    );
END
$$
"""

RUN_STEP = """
CREATE FUNCTION asr_run_step(
    p_tenant text, p_session text, p_run text, p_epoch integer, p_now timestamptz,
    p_lease timestamptz, p_turns integer, p_usage jsonb,
    p_finish boolean, p_status text, p_stop_reason text, p_output text, p_error jsonb,
    p_event_ids text[], p_types text[], p_run_ids text[], p_turn_ids text[],
    p_payloads text[],
    OUT o_session sessions, OUT o_run runs, OUT o_xact_id bigint, OUT o_positions bigint[]
) LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(cardinality(p_event_ids), 0);
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant, true);
    UPDATE sessions AS s
    SET last_seq = s.last_seq + n, version = s.version + 1, updated_at = p_now,
        active_run_id = CASE WHEN p_finish AND s.active_run_id = p_run
                             THEN NULL ELSE s.active_run_id END,
        status = CASE WHEN p_finish AND s.active_run_id = p_run
                      THEN 'idle' ELSE s.status END
    WHERE s.tenant_id = p_tenant AND s.session_id = p_session
    RETURNING s.* INTO o_session;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no such session' USING ERRCODE = 'AS002';
    END IF;
    UPDATE runs AS r
    SET updated_at = p_now,
        last_seq = o_session.last_seq,
        turns = coalesce(p_turns, r.turns),
        usage = coalesce(p_usage, r.usage),
        lease_expires_at = CASE WHEN p_finish THEN NULL ELSE p_lease END,
        status = CASE WHEN p_finish THEN p_status ELSE r.status END,
        stop_reason = CASE WHEN p_finish THEN p_stop_reason ELSE r.stop_reason END,
        output = CASE WHEN p_finish THEN p_output ELSE r.output END,
        error = CASE WHEN p_finish THEN p_error ELSE r.error END,
        finished_at = CASE WHEN p_finish THEN p_now ELSE r.finished_at END
    WHERE r.tenant_id = p_tenant AND r.run_id = p_run AND r.epoch = p_epoch
      AND r.status = 'running'
    RETURNING r.* INTO o_run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run was taken over' USING ERRCODE = 'AS004';
    END IF;
    o_xact_id := pg_current_xact_id()::text::bigint;
    o_positions := asr_insert_events(
        p_tenant, p_session, o_session.last_seq, o_xact_id, p_now,
        p_event_ids, p_types, p_run_ids, p_turn_ids, p_payloads
    );
END
$$
"""

SESSION_TAIL = """
CREATE FUNCTION asr_session_tail(
    p_tenant text, p_session text, p_created_at timestamptz, p_after bigint,
    OUT o_found boolean, OUT o_session sessions, OUT o_events session_events[]
) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant, true);
    SELECT s.* INTO o_session FROM sessions AS s
    WHERE s.tenant_id = p_tenant AND s.session_id = p_session;
    o_found := FOUND;
    IF NOT o_found OR o_session.created_at <> p_created_at
       OR p_after > o_session.last_seq THEN
        RETURN;
    END IF;
    SELECT coalesce(array_agg(e ORDER BY e.seq), '{}') INTO o_events
    FROM session_events AS e
    WHERE e.tenant_id = p_tenant AND e.session_id = p_session
      AND e.seq > p_after AND e.seq <= o_session.last_seq;
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(INSERT_EVENTS)
    op.execute(RUN_START)
    op.execute(RUN_STEP)
    op.execute(SESSION_TAIL)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name in ("asr_session_tail", "asr_run_step", "asr_run_start", "asr_insert_events"):
        op.execute(f"DROP FUNCTION {name}")
