-- A whole append in one call, so one round trip and one commit when called outside an
-- explicit transaction:
-- 1. scope the transaction to the tenant (the row-level policies bind it; SECURITY INVOKER
--    keeps the caller's rights, so the app role stays walled in);
-- 2. the write token: when the first event id is already in the ledger, this very append
--    committed before (a retry after a lost reply): answer with what it wrote, write nothing
--    (a caller that knows its events were never sent skips this: asr_append_fresh);
-- 3. reserve the seqs with the UPDATE of the session row (it takes the row lock, so appends
--    to one session queue here and seqs come out gapless), only when the expected seq /
--    version match (NULL: no condition); no row updated: return the row with appended false,
--    or nothing when there is no session;
-- 4. insert the events, and with p_snapshot_* the snapshot of the fold at the new last seq
--    (the caller knows that fold only under p_expected_seq); p_metadata replaces the row's
--    metadata (a merge patch the caller applied to the version it read: p_expected_version);
-- 5. record the Idempotency-Key, if any, in this same transaction.
CREATE OR REPLACE FUNCTION asr_append_events(
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
    v_positions bigint[];
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant, true);

    IF n > 0 THEN
        -- By tenant and event id, answered by the unique index on (tenant_id, event_id),
        -- and planned at each call (EXECUTE): every index of the table leads with
        -- tenant_id, so a plan made while the table was small (a pooled connection
        -- caches its generic plan from its sixth call, and nothing replans it until an
        -- ANALYZE) may pick another one and walk all of the tenant's events at every
        -- append from then on. A plan made for the table as it is picks this index.
        EXECUTE 'SELECT e.seq FROM session_events AS e'
                ' WHERE e.tenant_id = $1 AND e.event_id = $2'
           INTO v_first USING p_tenant, p_events->0->>'id';
        IF v_first IS NOT NULL THEN  -- EXECUTE leaves FOUND as it was
            SELECT x.* INTO s FROM sessions AS x
             WHERE x.tenant_id = p_tenant AND x.session_id = p_session;
            SELECT array_agg(e.position ORDER BY e.seq) INTO v_positions
              FROM session_events AS e
             WHERE e.tenant_id = p_tenant AND e.session_id = p_session
               AND e.seq BETWEEN v_first AND v_first + n - 1;
            RETURN QUERY SELECT true, v_first, s.tenant_id, s.session_id, s.root_session_id,
                s.parent_session_id, s.forked_from_seq, s.status, s.metadata, s.agent,
                s.binding, s.last_seq, s.version, s.active_run_id, s.created_at,
                s.updated_at, NULL::bigint, v_positions;
            RETURN;
        END IF;
    END IF;

    RETURN QUERY SELECT * FROM asr_append_fresh(
        p_tenant, p_session, p_expected_seq, p_expected_version, p_now, p_events, p_idem_key,
        p_idem_hash, p_idem_expires, p_metadata, p_snapshot_kind, p_snapshot_state,
        p_snapshot_hash
    );
END
$fn$;
