-- The webhook outbox (issue #20): the statement-level AFTER INSERT trigger on session_events
-- (migration 0010). It runs inside the transaction that inserts the events, so an outbox row
-- commits exactly when its event does: none is lost if a replica dies after the commit, and
-- none is invented for a write that rolls back. Every writer (the stored functions, the
-- fork's INSERT ... SELECT) is covered without a change to it. When the tenant has no active
-- subscription the trigger is one index probe: the hot append path pays that and no more.
-- A fork's copied prefix (seq <= forked_from_seq) is history, not news, and is skipped.
-- SECURITY INVOKER: the row-level policies bind the writer here as everywhere. Every insert
-- statement of the service writes one session's events, so one tenant's: the probe asks about
-- that tenant by name (not through the policies, which a superuser or the owner bypasses).
CREATE OR REPLACE FUNCTION asr_webhook_outbox() RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
DECLARE
    v_tenant text;
BEGIN
    SELECT e.tenant_id INTO v_tenant FROM asr_new_events AS e LIMIT 1;
    IF NOT EXISTS (
        SELECT 1 FROM webhook_subscriptions AS w
        WHERE w.tenant_id = v_tenant AND w.state = 'active'
    ) THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_deliveries (
        tenant_id, webhook_id, session_id, seq, event_id, event_type, status, attempts,
        next_attempt_at, created_at
    )
    SELECT e.tenant_id, w.webhook_id, e.session_id, e.seq, e.event_id, e.type, 'pending', 0,
           e.created_at, e.created_at
    FROM asr_new_events AS e
    JOIN sessions AS s ON s.tenant_id = e.tenant_id AND s.session_id = e.session_id
    JOIN webhook_subscriptions AS w ON w.tenant_id = e.tenant_id AND w.state = 'active'
    WHERE (w.event_types ? e.type OR w.event_types ? '*')
      AND (w.session_id IS NULL OR w.session_id = e.session_id)
      AND (w.metadata_filter IS NULL OR s.metadata @> w.metadata_filter)
      AND (s.forked_from_seq IS NULL OR e.seq > s.forked_from_seq)
    ORDER BY e.seq;
    RETURN NULL;
END
$fn$;
