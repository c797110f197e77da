-- A new session in one call: the row (refused with AS008 when the tenant already has this
-- id), its first events, an optional snapshot, and the Idempotency-Key if any.
CREATE OR REPLACE FUNCTION asr_create_session(
    p_tenant text,
    p_session text,
    p_root text,
    p_parent text,
    p_forked_from bigint,
    p_metadata jsonb,
    p_agent jsonb,
    p_binding jsonb,
    p_now timestamptz,
    p_events jsonb,
    p_snapshot_kind text DEFAULT NULL,
    p_snapshot_state text DEFAULT NULL,
    p_snapshot_hash text DEFAULT NULL,
    p_idem_key text DEFAULT NULL,
    p_idem_hash text DEFAULT NULL,
    p_idem_expires timestamptz DEFAULT NULL,
    OUT o_session sessions, OUT o_xact_id bigint, OUT o_positions bigint[]
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
DECLARE
    n integer := coalesce(jsonb_array_length(p_events), 0);
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant, true);
    INSERT INTO sessions AS s (
        tenant_id, session_id, root_session_id, parent_session_id, forked_from_seq, status,
        metadata, agent, binding, last_seq, version, active_run_id, created_at, updated_at
    ) VALUES (
        p_tenant, p_session, coalesce(p_root, p_session), p_parent, p_forked_from, 'idle',
        p_metadata, p_agent, p_binding, n, 1, NULL, p_now, p_now
    )
    ON CONFLICT (tenant_id, session_id) DO NOTHING
    RETURNING s.* INTO o_session;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % exists', p_session USING ERRCODE = 'AS008';
    END IF;
    o_xact_id := pg_current_xact_id()::text::bigint;
    o_positions := asr_insert_events(
        p_tenant, p_session, n, o_xact_id, p_now,
        p_events
    );
    IF p_snapshot_kind IS NOT NULL THEN
        PERFORM asr_insert_snapshot(
            p_tenant, p_session, n, p_snapshot_kind, p_snapshot_state, p_snapshot_hash, p_now
        );
    END IF;
    IF p_idem_key IS NOT NULL THEN
        PERFORM asr_seal_idempotency(
            p_tenant, p_idem_key, p_idem_hash, p_now, p_idem_expires,
            jsonb_build_object(
                'session_id', p_session, 'first_seq', 1, 'last_seq', n, 'version', 1
            )
        );
    END IF;
END
$fn$;
