-- Cross-tenant (SECURITY DEFINER; see install.py): the tenant with this name. Operators
-- name tenants (`asr key create --tenant NAME`, `asr sessions ... --tenant NAME`); every
-- transaction after this lookup names the tenant's id.
CREATE OR REPLACE FUNCTION asr_tenant_by_name(p_name text) RETURNS SETOF tenants
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
DECLARE
    was text := current_setting('app.cross_tenant', true);
BEGIN
    PERFORM set_config('app.cross_tenant', 'on', true);
    RETURN QUERY SELECT t.* FROM tenants AS t WHERE t.name = p_name;
    PERFORM set_config('app.cross_tenant', coalesce(was, ''), true);
END
$fn$;
