-- `asr_insert_events` for several sessions of one tenant at once, in one INSERT: a group
-- commit's batch writes every appended session's events with one call of this, where a call
-- of `asr_insert_events` per session paid a function call, a statement and an outbox probe
-- for each. Set k is session p_sessions[k]'s events `p_events[k]` (a JSON array as
-- `asr_insert_events` takes it, in seq order) with seqs p_last_seqs[k]-n+1 ..
-- p_last_seqs[k], created at p_nows[k]. The one-session writers keep `asr_insert_events`:
-- through this, a lone append paid a nested call more. A new event column is a line in
-- this INSERT and in the two of `asr_insert_events`.
-- The webhook outbox is filled here too, when the tenant has an active subscription: one
-- index probe otherwise, for all the sets.
-- Returns one row per set with events: its session and the positions of its events in seq
-- order.
CREATE OR REPLACE FUNCTION asr_insert_event_sets(
    p_tenant text, p_sessions text[], p_last_seqs bigint[], p_xact bigint,
    p_nows timestamptz[], p_events jsonb[]
) RETURNS TABLE (session_id varchar, positions bigint[])
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
#variable_conflict use_column
BEGIN
    -- The sets are walked by subscript, not by unnest: PostgreSQL sizes an unnest of a
    -- parameter by its length, so each call's own plan looked cheaper than the shared one
    -- and every call was planned anew, which cost more than running it.
    RETURN QUERY
    WITH inserted AS (
        INSERT INTO session_events AS e (
            tenant_id, session_id, seq, event_id, xact_id, type, run_id, turn_id, payload,
            created_at
        )
        SELECT p_tenant, p_sessions[k], p_last_seqs[k] - jsonb_array_length(p_events[k]) + v.ord,
               v.v->>'id', p_xact, v.v->>'type', v.v->>'run_id', v.v->>'turn_id',
               v.v->'payload', p_nows[k]
          FROM generate_subscripts(p_sessions, 1) AS k,
               jsonb_array_elements(p_events[k]) WITH ORDINALITY AS v(v, ord)
         ORDER BY k, v.ord
        RETURNING e.session_id, e.seq, e.position
    )
    SELECT i.session_id, array_agg(i.position ORDER BY i.seq)
      FROM inserted AS i
     GROUP BY i.session_id;
    IF EXISTS (
        SELECT 1 FROM webhook_subscriptions AS w
        WHERE w.tenant_id = p_tenant AND w.state = 'active'
    ) THEN
        PERFORM asr_webhook_outbox(
            p_tenant, p_sessions[k], p_last_seqs[k] - jsonb_array_length(p_events[k]) + 1,
            p_last_seqs[k]
        )
           FROM generate_subscripts(p_sessions, 1) AS k
          WHERE jsonb_array_length(p_events[k]) > 0;
    END IF;
END
$fn$;
