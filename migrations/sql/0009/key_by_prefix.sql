-- Cross-tenant (SECURITY DEFINER; see install.py): the API key with this public prefix,
-- revoked or not, of whichever tenant. Authentication needs it before it knows the tenant,
-- and the app role's own policies admit only the tenant its transaction names.
CREATE OR REPLACE FUNCTION asr_key_by_prefix(p_prefix text) RETURNS SETOF api_keys
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
DECLARE
    was text := current_setting('app.cross_tenant', true);
BEGIN
    PERFORM set_config('app.cross_tenant', 'on', true);
    RETURN QUERY SELECT k.* FROM api_keys AS k WHERE k.prefix = p_prefix;
    PERFORM set_config('app.cross_tenant', coalesce(was, ''), true);
END
$fn$;
