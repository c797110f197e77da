-- Cross-tenant (SECURITY DEFINER; see install.py): those of p_prefixes whose key exists
-- and is not revoked, whichever their tenants. Each replica re-checks the keys of all its
-- open streams with it, in one query, every few seconds. Only prefixes the caller already
-- holds come back.
CREATE OR REPLACE FUNCTION asr_live_key_prefixes(p_prefixes text[]) RETURNS SETOF text
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $fn$
DECLARE
    was text := current_setting('app.cross_tenant', true);
BEGIN
    PERFORM set_config('app.cross_tenant', 'on', true);
    RETURN QUERY SELECT k.prefix::text FROM api_keys AS k
     WHERE k.prefix = ANY (p_prefixes) AND k.revoked_at IS NULL;
    PERFORM set_config('app.cross_tenant', coalesce(was, ''), true);
END
$fn$;
