-- Start a run in one call: the tenant's live-run cap, the claim of the session (only when no
-- run holds it, and, with p_expected_*, only when it is still the version the caller's cached
-- view holds) with its seq reservation, the run row (written once, already running), the
-- start events, and the Idempotency-Key if any, all in one transaction. Refusals are AS0xx
-- exceptions, mapped onto domain errors by app/store/postgres/calls.py: AS001 too many live
-- runs, AS002 no session, AS003 another run is active, AS005 the session changed, AS006 the
-- key was taken by a committed duplicate.
CREATE OR REPLACE FUNCTION asr_run_start(
    p_tenant text, p_session text, p_run text, p_max_live integer, p_now timestamptz,
    p_owner text, p_lease timestamptz, p_input jsonb, p_options jsonb,
    p_expected_version bigint, p_expected_created_at timestamptz,
    p_events jsonb,
    p_idem_key text DEFAULT NULL, p_idem_hash text DEFAULT NULL,
    p_idem_expires timestamptz DEFAULT NULL,
    OUT o_session sessions, OUT o_run runs, OUT o_xact_id bigint, OUT o_positions bigint[]
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
DECLARE
    n integer := coalesce(jsonb_array_length(p_events), 0);
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
        o_session.last_seq - n + 1, o_session.last_seq, p_idem_key, 1, p_owner,
        p_lease, p_now, p_now, p_now
    )
    RETURNING r.* INTO o_run;
    o_positions := asr_insert_events(
        p_tenant, p_session, o_session.last_seq, o_xact_id, p_now,
        p_events
    );
    IF p_idem_key IS NOT NULL THEN
        PERFORM asr_seal_idempotency(
            p_tenant, p_idem_key, p_idem_hash, p_now, p_idem_expires,
            jsonb_build_object(
                'session_id', p_session, 'first_seq', o_session.last_seq - n + 1,
                'last_seq', o_session.last_seq, 'version', o_session.version, 'run_id', p_run
            )
        );
    END IF;
END
$fn$;
