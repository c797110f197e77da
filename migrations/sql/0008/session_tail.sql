-- The read of a session whose state the caller holds up to p_after: the row and the events
-- after that seq, in one call (NULL events when the held state is not of this incarnation of
-- the session, or is ahead of it).
CREATE OR REPLACE FUNCTION asr_session_tail(
    p_tenant text, p_session text, p_created_at timestamptz, p_after bigint,
    OUT o_found boolean, OUT o_session sessions, OUT o_events session_events[]
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
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
$fn$;
