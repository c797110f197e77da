-- asr_append_events without the write-token check (its steps 1 and 3-5): for an append whose
-- event ids were made for this call and never sent before, which cannot have committed. The
-- check is a statement planned at every call (see asr_append_events why), the costliest
-- part of a small append; only a re-sent append (a batch retried one by one) needs it.
CREATE OR REPLACE FUNCTION asr_append_fresh(
    p_tenant text,
    p_session text,
    p_expected_seq bigint,
    p_expected_version bigint,
    p_now timestamptz,
    p_events jsonb,
    p_idem_key text DEFAULT NULL,
    p_idem_hash text DEFAULT NULL,
    p_idem_expires timestamptz DEFAULT NULL,
    p_metadata jsonb DEFAULT NULL,
    p_snapshot_kind text DEFAULT NULL,
    p_snapshot_state text DEFAULT NULL,
    p_snapshot_hash text DEFAULT NULL
) RETURNS TABLE (
    appended boolean,
    first_seq bigint,
    tenant_id varchar,
    session_id varchar,
    root_session_id varchar,
    parent_session_id varchar,
    forked_from_seq bigint,
    status varchar,
    metadata jsonb,
    agent jsonb,
    binding jsonb,
    last_seq bigint,
    version bigint,
    active_run_id varchar,
    created_at timestamptz,
    updated_at timestamptz,
    xact_id bigint,
    positions bigint[]
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
#variable_conflict use_column
DECLARE
    n integer := coalesce(jsonb_array_length(p_events), 0);
    s sessions%ROWTYPE;
    v_first bigint;
    v_xact bigint;
    v_positions bigint[];
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant, true);

    UPDATE sessions AS x
       SET last_seq = x.last_seq + n, version = x.version + 1, updated_at = p_now,
           metadata = coalesce(p_metadata, x.metadata)
     WHERE x.tenant_id = p_tenant AND x.session_id = p_session
       AND (p_expected_seq IS NULL OR x.last_seq = p_expected_seq)
       AND (p_expected_version IS NULL OR x.version = p_expected_version)
    RETURNING x.* INTO s;

    IF NOT FOUND THEN
        SELECT x.* INTO s FROM sessions AS x
         WHERE x.tenant_id = p_tenant AND x.session_id = p_session;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        RETURN QUERY SELECT false, NULL::bigint, s.tenant_id, s.session_id,
            s.root_session_id, s.parent_session_id, s.forked_from_seq, s.status, s.metadata,
            s.agent, s.binding, s.last_seq, s.version, s.active_run_id, s.created_at,
            s.updated_at, NULL::bigint, NULL::bigint[];
        RETURN;
    END IF;

    v_first := s.last_seq - n + 1;
    v_xact := pg_current_xact_id()::text::bigint;
    v_positions := asr_insert_events(
        p_tenant, p_session, s.last_seq, v_xact, p_now,
        p_events
    );
    IF p_snapshot_kind IS NOT NULL THEN
        PERFORM asr_insert_snapshot(
            p_tenant, p_session, s.last_seq, p_snapshot_kind, p_snapshot_state, p_snapshot_hash,
            p_now
        );
    END IF;
    IF p_idem_key IS NOT NULL THEN
        PERFORM asr_seal_idempotency(
            p_tenant, p_idem_key, p_idem_hash, p_now, p_idem_expires,
            jsonb_build_object(
                'session_id', p_session, 'first_seq', v_first, 'last_seq', s.last_seq,
                'version', s.version
            )
        );
    END IF;

    RETURN QUERY SELECT true, v_first, s.tenant_id, s.session_id, s.root_session_id,
        s.parent_session_id, s.forked_from_seq, s.status, s.metadata, s.agent, s.binding,
        s.last_seq, s.version, s.active_run_id, s.created_at, s.updated_at,
        v_xact, v_positions;
END
$fn$;
