-- Cross-tenant (SECURITY DEFINER; see install.py): delete every tenant's expired
-- Idempotency-Key rows and return how many went. Expiry is this database's clock, so the
-- caller cannot make it delete a key that is still live.
CREATE OR REPLACE FUNCTION asr_delete_expired_idempotency_keys() RETURNS bigint
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
    DELETE FROM idempotency_keys AS k WHERE k.expires_at <= now();
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM set_config('app.cross_tenant', coalesce(was, ''), true);
    RETURN n;
END
$fn$;
