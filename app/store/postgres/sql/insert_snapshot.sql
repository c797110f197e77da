-- A snapshot row of the fold at `p_seq` (the session's last seq, in the transaction of the
-- events it covers); nothing when `p_kind` is NULL. The state arrives as its canonical JSON
-- text, stored as it is, with the hash the caller computed over those bytes (checked on
-- every load).
CREATE OR REPLACE FUNCTION asr_insert_snapshot(
    p_tenant text, p_session text, p_seq bigint, p_kind text, p_state text, p_hash text,
    p_now timestamptz
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
BEGIN
    IF p_kind IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO session_snapshots (tenant_id, session_id, seq, kind, state, state_hash, created_at)
    VALUES (p_tenant, p_session, p_seq, p_kind, p_state, p_hash, p_now);
END
$fn$;
