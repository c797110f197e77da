-- The closing events of a run that was fenced (taken over), in one call, and its session
-- freed. Idempotent: when the run is still live, or no longer holds its session (it was
-- closed already), nothing is written and o_closed is false.
CREATE OR REPLACE FUNCTION asr_run_close(
    p_tenant text,
    p_run text,
    p_now timestamptz,
    p_events jsonb,
    OUT o_closed boolean, OUT o_session sessions, OUT o_xact_id bigint,
    OUT o_positions bigint[]
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
DECLARE
    n integer := coalesce(jsonb_array_length(p_events), 0);
    v_run runs%ROWTYPE;
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant, true);
    o_closed := false;
    SELECT r.* INTO v_run FROM runs AS r WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
    IF NOT FOUND OR v_run.status IN ('queued', 'running') THEN
        RETURN;
    END IF;
    UPDATE sessions AS s
       SET last_seq = s.last_seq + n, version = s.version + 1, updated_at = p_now,
           active_run_id = NULL, status = 'idle'
     WHERE s.tenant_id = p_tenant AND s.session_id = v_run.session_id
       AND s.active_run_id = p_run
    RETURNING s.* INTO o_session;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    o_closed := true;
    o_xact_id := pg_current_xact_id()::text::bigint;
    o_positions := asr_insert_events(
        p_tenant, v_run.session_id, o_session.last_seq, o_xact_id, p_now,
        p_events
    );
    UPDATE runs AS r SET last_seq = o_session.last_seq
     WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
END
$fn$;
