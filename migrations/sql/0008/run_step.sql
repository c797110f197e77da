-- One step of a run in one call: the seq reservation (freeing the session when the run ends
-- and still holds it), the update of the run row fenced by its epoch (AS004 when the run was
-- taken over: everything rolls back), the events.
CREATE OR REPLACE FUNCTION asr_run_step(
    p_tenant text, p_session text, p_run text, p_epoch integer, p_now timestamptz,
    p_lease timestamptz, p_turns integer, p_usage jsonb,
    p_finish boolean, p_status text, p_stop_reason text, p_output text, p_error jsonb,
    p_events jsonb,
    OUT o_session sessions, OUT o_run runs, OUT o_xact_id bigint, OUT o_positions bigint[]
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
DECLARE
    n integer := coalesce(jsonb_array_length(p_events), 0);
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
        p_events
    );
END
$fn$;
