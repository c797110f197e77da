-- The writers' shared tail: insert events with seqs p_last_seq-n+1 .. p_last_seq.
-- Payloads arrive as JSON text (encoded once by the caller) and are cast to jsonb here.
-- Returns the events' global positions in seq order.
CREATE OR REPLACE FUNCTION asr_insert_events(
    p_tenant text, p_session text, p_last_seq bigint, p_xact bigint, p_now timestamptz,
    p_event_ids text[], p_types text[], p_run_ids text[], p_turn_ids text[],
    p_payloads text[]
) RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
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
$fn$;
