-- Cross-tenant (SECURITY DEFINER; see install.py): a deliverer's next work, at most p_limit
-- deliveries that are due: pending, of an active subscription, not claimed by a live claim,
-- and each the oldest pending one of its (subscription, session), so that a session's
-- events reach a subscription in order. Each is claimed for p_owner until now() +
-- p_lease_seconds; FOR UPDATE SKIP LOCKED lets replicas claim side by side, never the same
-- row. Only keys come back: the deliverer reads the event and the secret in the tenant's own
-- transaction, and settles the attempt there (conditional on its claim).
CREATE OR REPLACE FUNCTION asr_webhook_claim(p_owner text, p_limit integer, p_lease_seconds integer)
RETURNS TABLE (tenant_id varchar, webhook_id varchar, session_id varchar, seq bigint,
               attempts integer)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
DECLARE
    was text := current_setting('app.cross_tenant', true);
BEGIN
    PERFORM set_config('app.cross_tenant', 'on', true);
    RETURN QUERY
        WITH due AS (
            SELECT d.tenant_id, d.webhook_id, d.session_id, d.seq
            FROM webhook_deliveries AS d
            JOIN webhook_subscriptions AS w
              ON w.tenant_id = d.tenant_id AND w.webhook_id = d.webhook_id
            WHERE d.status = 'pending' AND d.next_attempt_at <= now()
              AND w.state = 'active'
              AND (d.claimed_until IS NULL OR d.claimed_until < now())
              AND NOT EXISTS (
                  SELECT 1 FROM webhook_deliveries AS b
                  WHERE b.tenant_id = d.tenant_id AND b.webhook_id = d.webhook_id
                    AND b.session_id = d.session_id AND b.seq < d.seq
                    AND b.status = 'pending')
            ORDER BY d.next_attempt_at
            LIMIT p_limit
            FOR UPDATE OF d SKIP LOCKED
        )
        UPDATE webhook_deliveries AS u
           SET claimed_by = p_owner,
               claimed_until = now() + make_interval(secs => p_lease_seconds),
               attempts = u.attempts + 1
          FROM due
         WHERE u.tenant_id = due.tenant_id AND u.webhook_id = due.webhook_id
           AND u.session_id = due.session_id AND u.seq = due.seq
        RETURNING u.tenant_id, u.webhook_id, u.session_id, u.seq, u.attempts;
    PERFORM set_config('app.cross_tenant', coalesce(was, ''), true);
END
$fn$;
