-- Record an Idempotency-Key in the transaction of the work it guards, with `p_result` (what
-- the work committed: session, seq range, version, run). A live row under the same key means
-- a duplicate committed first: refuse with AS006, which rolls the whole transaction back (the
-- caller replays the stored answer instead). An expired row is taken over.
CREATE OR REPLACE FUNCTION asr_seal_idempotency(
    p_tenant text, p_key text, p_hash text, p_now timestamptz, p_expires timestamptz,
    p_result jsonb
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
BEGIN
    IF p_key IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO idempotency_keys AS k (
        tenant_id, key, request_hash, result, created_at, expires_at
    ) VALUES (p_tenant, p_key, p_hash, p_result, p_now, p_expires)
    ON CONFLICT (tenant_id, key) DO UPDATE
        SET request_hash = excluded.request_hash, result = excluded.result,
            status_code = NULL, response = NULL, headers = NULL,
            created_at = excluded.created_at, expires_at = excluded.expires_at
        WHERE k.expires_at <= p_now;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idempotency key % is taken', p_key USING ERRCODE = 'AS006';
    END IF;
END
$fn$;
