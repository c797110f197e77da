-- A fork in one call: the child row (in the source's tree; AS008 when the id is taken)
-- whose ledger starts as a server-side copy of the source's events 1..p_at_seq (new event
-- ids, same seqs and payloads; the source is only read), then the child's own events, a
-- server-side copy of the source's newest snapshot at or below p_at_seq (the fold of the
-- very events the child now holds up to its seq; kind `fork`, same state and hash, never
-- decoded or encoded here or in Python), and the Idempotency-Key if any.
-- AS002: no source; AS007: p_at_seq outside 0..the source's last seq (its last seq in the
-- message).
CREATE OR REPLACE FUNCTION asr_fork_session(
    p_tenant text,
    p_source text,
    p_at_seq bigint,
    p_session text,
    p_metadata jsonb,
    p_agent jsonb,
    p_binding jsonb,
    p_now timestamptz,
    p_events jsonb,
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
    v_source sessions%ROWTYPE;
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant, true);
    SELECT x.* INTO v_source FROM sessions AS x
     WHERE x.tenant_id = p_tenant AND x.session_id = p_source;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no such session' USING ERRCODE = 'AS002';
    END IF;
    IF p_at_seq < 0 OR p_at_seq > v_source.last_seq THEN
        RAISE EXCEPTION '%', v_source.last_seq USING ERRCODE = 'AS007';
    END IF;
    INSERT INTO sessions AS s (
        tenant_id, session_id, root_session_id, parent_session_id, forked_from_seq, status,
        metadata, agent, binding, last_seq, version, active_run_id, created_at, updated_at
    ) VALUES (
        p_tenant, p_session, v_source.root_session_id, p_source, p_at_seq, 'idle',
        p_metadata, p_agent, p_binding, p_at_seq + n, 1, NULL, p_now, p_now
    )
    ON CONFLICT (tenant_id, session_id) DO NOTHING
    RETURNING s.* INTO o_session;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % exists', p_session USING ERRCODE = 'AS008';
    END IF;
    o_xact_id := pg_current_xact_id()::text::bigint;
    o_positions := asr_insert_events(
        p_tenant, p_session, o_session.last_seq, o_xact_id, p_now,
        p_events, p_copy_from => p_source, p_copy_upto => p_at_seq
    );
    INSERT INTO session_snapshots (tenant_id, session_id, seq, kind, state, state_hash, created_at)
    SELECT p.tenant_id, p_session, p.seq, 'fork', p.state, p.state_hash, p_now
      FROM session_snapshots AS p
     WHERE p.tenant_id = p_tenant AND p.session_id = p_source AND p.seq <= p_at_seq
     ORDER BY p.seq DESC
     LIMIT 1;
    IF p_idem_key IS NOT NULL THEN
        PERFORM asr_seal_idempotency(
            p_tenant, p_idem_key, p_idem_hash, p_now, p_idem_expires,
            jsonb_build_object(
                'session_id', p_session, 'first_seq', p_at_seq + 1,
                'last_seq', o_session.last_seq, 'version', 1
            )
        );
    END IF;
END
$fn$;
