-- Cross-tenant (SECURITY DEFINER; see install.py): the schedulers' work list, at most
-- p_limit schedules, earliest first: active ones whose next tick is due, and active ones
-- whose tick is claimed by a replica whose claim expired (it died between its claim and
-- its record: the tick is fired again, under the same Idempotency-Key). Due by this
-- database's clock. Each scheduler then claims each one in its tenant's own transaction,
-- conditionally on the row's version, so one replica fires a tick and the others skip it.
-- A claimed tick's next_fire_at is still the tick that was due, so one range of the
-- (status, next_fire_at) index holds both kinds, and a poll reads only due rows.
-- The result names its columns (no table type): the function is created by migrations
-- older than the table, and PL/pgSQL resolves the body only when it runs.
CREATE OR REPLACE FUNCTION asr_due_schedules(p_limit integer)
RETURNS TABLE (o_tenant text, o_schedule text)
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
        SELECT s.tenant_id::text, s.schedule_id::text FROM schedules AS s
         WHERE s.status = 'active'
           AND s.next_fire_at <= now()
           AND (s.claim_tick_at IS NULL OR s.claim_expires_at < now())
         ORDER BY s.next_fire_at
         LIMIT p_limit;
    PERFORM set_config('app.cross_tenant', coalesce(was, ''), true);
END
$fn$;
