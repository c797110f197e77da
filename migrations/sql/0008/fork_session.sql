-- A fork in one call: the child row (in the source's tree; AS008 when the id is taken)
-- whose ledger starts as a server-side copy of the source's events 1..p_at_seq (new event
-- ids, same seqs and payloads; the source is only read), then the child's own events, the
-- `fork` snapshot of the child's state at its last seq, and the Idempotency-Key if any.
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
    p_snapshot_state text,
    p_snapshot_hash text,
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
    INSERT INTO session_events (
        tenant_id, session_id, seq, event_id, xact_id, type, run_id, turn_id, payload,
        created_at
    )
    SELECT e.tenant_id, p_session, e.seq, gen_random_uuid()::text, o_xact_id, e.type,
           e.run_id, e.turn_id, e.payload, e.created_at
      FROM session_events AS e
     WHERE e.tenant_id = p_tenant AND e.session_id = p_source AND e.seq <= p_at_seq
     ORDER BY e.seq;
    o_positions := asr_insert_events(
        p_tenant, p_session, o_session.last_seq, o_xact_id, p_now,
        p_events
    );
    PERFORM asr_insert_snapshot(
        p_tenant, p_session, o_session.last_seq, 'fork', p_snapshot_state, p_snapshot_hash,
        p_now
    );
    PERFORM asr_seal_idempotency(
        p_tenant, p_idem_key, p_idem_hash, p_now, p_idem_expires,
        jsonb_build_object(
            'session_id', p_session, 'first_seq', p_at_seq + 1,
            'last_seq', o_session.last_seq, 'version', 1
        )
    );
END
$fn$;
