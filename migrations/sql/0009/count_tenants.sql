-- Cross-tenant (SECURITY DEFINER; see install.py): how many tenants there are. `asr serve`
-- makes the bootstrap tenant `default` only on a database that has none.
CREATE OR REPLACE FUNCTION asr_count_tenants() RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
DECLARE
    was text := current_setting('app.cross_tenant', true);
    n bigint;
BEGIN
    PERFORM set_config('app.cross_tenant', 'on', true);
    SELECT count(*) INTO n FROM tenants;
    PERFORM set_config('app.cross_tenant', coalesce(was, ''), true);
    RETURN n;
END
$fn$;
