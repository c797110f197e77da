-- The webhook outbox: the deliveries of events p_first..p_last of one session,
-- one row per (active subscription of the tenant, matching event). `asr_insert_events` calls
-- it right after inserting those events, only when the tenant has an active subscription, so
-- an outbox row commits exactly when its event does: none is lost if a replica dies after
-- the commit, and none is invented for a write that rolls back. It is not a trigger: a
-- statement-level trigger needs a transition table, which PostgreSQL fills with every row the
-- statement inserts whether or not anyone subscribes (a fork's 20,000-row copy spilled 14 MB
-- to disk for it), and every append paid for the trigger's call and its tuplestore. A fork's
-- copied prefix is history, not news: it is never in the range this is called for.
-- SECURITY INVOKER: the row-level policies bind the writer here as everywhere.
CREATE OR REPLACE FUNCTION asr_webhook_outbox(
    p_tenant text, p_session text, p_first bigint, p_last bigint
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
BEGIN
    INSERT INTO webhook_deliveries (
        tenant_id, webhook_id, session_id, seq, event_id, event_type, status, attempts,
        next_attempt_at, created_at
    )
    SELECT e.tenant_id, w.webhook_id, e.session_id, e.seq, e.event_id, e.type, 'pending', 0,
           e.created_at, e.created_at
    FROM session_events AS e
    JOIN sessions AS s ON s.tenant_id = e.tenant_id AND s.session_id = e.session_id
    JOIN webhook_subscriptions AS w ON w.tenant_id = e.tenant_id AND w.state = 'active'
    WHERE e.tenant_id = p_tenant AND e.session_id = p_session
      AND e.seq BETWEEN p_first AND p_last
      AND (w.event_types ? e.type OR w.event_types ? '*')
      AND (w.session_id IS NULL OR w.session_id = e.session_id)
      AND (w.metadata_filter IS NULL OR s.metadata @> w.metadata_filter)
    ORDER BY e.seq;
END
$fn$;
