-- Cross-tenant (SECURITY DEFINER; see install.py): the run sweeper's work list, at most
-- p_limit of each kind: live runs whose lease expired (by this database's clock, so no
-- caller can widen it to live leases), and runs no longer live that still hold their
-- session. The sweeper fences and closes each one in its own tenant's transaction, where
-- the fence checks the lease again.
CREATE OR REPLACE FUNCTION asr_stale_runs(p_limit integer) RETURNS SETOF runs
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
        (SELECT r.* FROM runs AS r
          WHERE r.status IN ('queued', 'running') AND r.lease_expires_at < now()
          LIMIT p_limit)
        UNION ALL
        (SELECT r.* FROM runs AS r
           JOIN sessions AS s ON s.tenant_id = r.tenant_id AND s.active_run_id = r.run_id
          WHERE r.status NOT IN ('queued', 'running')
          LIMIT p_limit);
    PERFORM set_config('app.cross_tenant', coalesce(was, ''), true);
END
$fn$;
