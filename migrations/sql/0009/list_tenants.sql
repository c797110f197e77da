-- Cross-tenant (SECURITY DEFINER; see install.py): every tenant's row (`asr tenant list`,
-- and retention, which then works through the tenants one transaction each). The tenants
-- table only: no key, session or event of theirs.
CREATE OR REPLACE FUNCTION asr_list_tenants() RETURNS SETOF tenants
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
DECLARE
    was text := current_setting('app.cross_tenant', true);
BEGIN
    PERFORM set_config('app.cross_tenant', 'on', true);
    RETURN QUERY SELECT t.* FROM tenants AS t;
    PERFORM set_config('app.cross_tenant', coalesce(was, ''), true);
END
$fn$;
