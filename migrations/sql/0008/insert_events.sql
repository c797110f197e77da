-- The writers' shared tail: insert events with seqs p_last_seq-n+1 .. p_last_seq.
-- `p_events` is a JSON array of {id, type, run_id, turn_id, payload} in seq order (built once
-- by the caller, payloads already redacted): the one place an event's columns are listed, so
-- a new column is this function, the encoder in calls.py, and a migration.
-- Returns the events' global positions in seq order.
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
