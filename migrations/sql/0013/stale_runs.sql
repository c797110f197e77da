-- Cross-tenant (SECURITY DEFINER; see install.py): the run sweeper's work list, at most
-- p_limit of each kind: live runs whose lease expired (by this database's clock, so no
-- caller can widen it to live leases), and runs no longer live that still hold their
-- session. The sweeper fences and closes each one in its own tenant's transaction, where
-- the fence checks the lease again.
--
-- EXECUTE plans the query at every call. A static query's plan is cached for the life of
-- the connection: in the benchmarks, on a server with autovacuum off (tables never
-- analysed), one call was seen active for 49 s at 16,000 runs, its backend busy. The plan
-- was not captured; one cached while the tables were small and kept as they grew is the
-- likely cause. The second kind starts from the partial index of sessions that hold a run
-- (migration 0013): few rows however many runs.
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
    RETURN QUERY EXECUTE
        '(SELECT r.* FROM runs AS r
           WHERE r.status IN (''queued'', ''running'') AND r.lease_expires_at < now()
           LIMIT $1)
         UNION ALL
         (SELECT r.* FROM sessions AS s
            JOIN runs AS r ON r.tenant_id = s.tenant_id AND r.run_id = s.active_run_id
           WHERE s.active_run_id IS NOT NULL AND r.status NOT IN (''queued'', ''running'')
           LIMIT $1)'
        USING p_limit;
    PERFORM set_config('app.cross_tenant', coalesce(was, ''), true);
END
$fn$;
