-- Group commit: several appends (to any sessions, of any tenants) in one call and one commit.
-- Each item is exactly one asr_append_events inside this one transaction, applied in
-- (tenant, session, arrival) order, so two batches in flight lock session rows in the same
-- global order and cannot deadlock, and two appends to one session apply in arrival order.
-- An item whose condition fails or whose session is missing is reported, not raised. One row
-- per item comes back (asr_append_events' columns plus `idx`, the item's position). Each
-- item carries its event ids as a write token, so re-sending a batch whose reply was lost
-- (or its items one by one) applies nothing twice.
CREATE OR REPLACE FUNCTION asr_append_batch(
    p_tenants text[],
    p_sessions text[],
    p_expected_seqs bigint[],
    p_expected_versions bigint[],
    p_nows timestamptz[],
    p_events text[],
    p_idem_keys text[],
    p_idem_hashes text[],
    p_idem_expires timestamptz[],
    p_metadatas text[],
    p_snapshot_kinds text[],
    p_snapshot_states text[],
    p_snapshot_hashes text[]
) RETURNS TABLE (
    idx integer,
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
DECLARE
    i integer;
BEGIN
    FOR i IN
        SELECT u.ord FROM unnest(p_tenants, p_sessions) WITH ORDINALITY AS u(t, sid, ord)
        ORDER BY u.t, u.sid, u.ord
    LOOP
        RETURN QUERY SELECT i, r.* FROM asr_append_events(
            p_tenants[i], p_sessions[i], p_expected_seqs[i], p_expected_versions[i],
            p_nows[i], p_events[i]::jsonb,
            p_idem_keys[i], p_idem_hashes[i], p_idem_expires[i], p_metadatas[i]::jsonb,
            p_snapshot_kinds[i], p_snapshot_states[i], p_snapshot_hashes[i]
        ) AS r;
    END LOOP;
END
$fn$;
