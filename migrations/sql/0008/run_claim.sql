-- A queued run gets its turn, in one call: it must still be queued (AS004 otherwise: it was
-- cancelled meanwhile), with p_oldest_only no older queued run of the session may wait
-- (AS003), and the session must be free (AS003 with the holder's id); then the session is
-- claimed with its seq reservation, the run row marked running with its lease, and its
-- first events written.
CREATE OR REPLACE FUNCTION asr_run_claim(
    p_tenant text,
    p_run text,
    p_owner text,
    p_lease timestamptz,
    p_now timestamptz,
    p_oldest_only boolean,
    p_events jsonb,
    OUT o_session sessions, OUT o_run runs, OUT o_xact_id bigint, OUT o_positions bigint[]
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
DECLARE
    n integer := coalesce(jsonb_array_length(p_events), 0);
    v_run runs%ROWTYPE;
    v_active text;
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant, true);
    SELECT r.* INTO v_run FROM runs AS r WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
    IF NOT FOUND OR v_run.status <> 'queued' THEN
        RAISE EXCEPTION 'run % is not queued', p_run USING ERRCODE = 'AS004';
    END IF;
    IF p_oldest_only AND EXISTS (
        SELECT 1 FROM runs AS r
         WHERE r.tenant_id = p_tenant AND r.session_id = v_run.session_id
           AND r.status = 'queued' AND r.created_at < v_run.created_at
    ) THEN
        RAISE EXCEPTION '' USING ERRCODE = 'AS003';
    END IF;
    UPDATE sessions AS s
       SET active_run_id = p_run, status = 'running', last_seq = s.last_seq + n,
           version = s.version + 1, updated_at = p_now
     WHERE s.tenant_id = p_tenant AND s.session_id = v_run.session_id
       AND s.active_run_id IS NULL
    RETURNING s.* INTO o_session;
    IF NOT FOUND THEN
        SELECT s.active_run_id INTO v_active FROM sessions AS s
         WHERE s.tenant_id = p_tenant AND s.session_id = v_run.session_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no such session' USING ERRCODE = 'AS002';
        END IF;
        RAISE EXCEPTION '%', v_active USING ERRCODE = 'AS003';
    END IF;
    o_xact_id := pg_current_xact_id()::text::bigint;
    o_positions := asr_insert_events(
        p_tenant, v_run.session_id, o_session.last_seq, o_xact_id, p_now,
        p_events
    );
    UPDATE runs AS r
       SET status = 'running', lease_owner = p_owner, lease_expires_at = p_lease,
           started_at = p_now, updated_at = p_now, first_seq = o_session.last_seq - n + 1,
           last_seq = o_session.last_seq
     WHERE r.tenant_id = p_tenant AND r.run_id = p_run
    RETURNING r.* INTO o_run;
END
$fn$;
