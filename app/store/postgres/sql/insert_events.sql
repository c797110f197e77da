-- The writers' shared tail for one session: insert events with seqs p_last_seq-n+1 ..
-- p_last_seq. `p_events` is a JSON array of objects {id, type, payload, and NewEvent's
-- other fields by name} in seq order (built once by the caller, payloads already
-- redacted). With `p_copy_from`, a fork's prefix comes first: that session's events
-- 1..p_copy_upto, copied server-side with new ids (same seqs, payloads and times). Those
-- ids are time-ordered UUIDs (version 7, RFC 9562): p_now's milliseconds, then the seq as
-- the RFC's dedicated counter (26 bits, in rand_a and the top of rand_b), then 48 random
-- bits. A fork's ids thus sit together in the (tenant_id, event_id) index; random ids landed
-- all over it, a page per copied row. A new event column is a line in each of the two
-- INSERTs here and in the one of `asr_insert_event_sets` (a group commit's batch, many
-- sessions at once); `tests/store/test_event_columns.py` checks that the three agree.
-- The webhook outbox is filled here too, for the events of `p_events` (never the copy), when
-- the tenant has an active subscription: one index probe otherwise.
-- Returns the positions of the events of `p_events` (not of the copy) in seq order.
CREATE OR REPLACE FUNCTION asr_insert_events(
    p_tenant text, p_session text, p_last_seq bigint, p_xact bigint, p_now timestamptz,
    p_events jsonb, p_copy_from text DEFAULT NULL, p_copy_upto bigint DEFAULT 0
) RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
DECLARE
    n integer := coalesce(jsonb_array_length(p_events), 0);
    v_positions bigint[];
    v_ms bigint;
BEGIN
    IF p_copy_from IS NOT NULL AND p_copy_upto > 0 THEN
        v_ms := floor(extract(epoch FROM p_now) * 1000)::bigint;  -- the copy's ids (above)
        INSERT INTO session_events AS e (
            tenant_id, session_id, seq, event_id, xact_id, type, run_id, turn_id, payload,
            created_at
        )
        SELECT c.tenant_id, p_session, c.seq,
               lpad(to_hex(v_ms >> 16), 8, '0') || '-' || lpad(to_hex(v_ms & 65535), 4, '0')
               || '-7' || lpad(to_hex((c.seq >> 14) & 4095), 3, '0')
               || '-' || to_hex(32768 | (c.seq & 16383))
               || '-' || lpad(to_hex(floor(random() * 281474976710656)::bigint), 12, '0'),
               p_xact, c.type, c.run_id, c.turn_id, c.payload, c.created_at
          FROM session_events AS c
         WHERE c.tenant_id = p_tenant AND c.session_id = p_copy_from AND c.seq <= p_copy_upto
         ORDER BY c.seq;
    END IF;
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
    IF EXISTS (
        SELECT 1 FROM webhook_subscriptions AS w
        WHERE w.tenant_id = p_tenant AND w.state = 'active'
    ) THEN
        PERFORM asr_webhook_outbox(p_tenant, p_session, p_last_seq - n + 1, p_last_seq);
    END IF;
    RETURN v_positions;
END
$fn$;
