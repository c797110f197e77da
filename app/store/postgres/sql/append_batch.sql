-- Group commit: several appends (to any sessions, of any tenants) in one call and one commit.
-- Each item is the same conditional append as asr_append_fresh, inside this one transaction.
-- An item whose condition fails or whose session is missing is reported, not raised. One row
-- per item comes back (asr_append_fresh's columns plus `idx`, the item's position).
--
-- A batch is sent once, as a first attempt: its items' event ids were made for them and
-- never sent, so none can be in the ledger and no item pays the write-token check (a
-- statement planned at every call; see asr_append_events). A batch whose reply is lost is
-- never sent again as a batch: its items are re-sent one by one with asr_append_events,
-- whose write token makes each apply once.
--
-- Two ways, with the same results:
-- * Together, when the batch is what many writers make (one tenant, each session once, no
--   Idempotency-Key, no snapshot): its session rows are locked in session order, then one
--   UPDATE of them all, then one INSERT of all their events. Per item, the loop below pays
--   a call of asr_append_fresh, its statements and their plans; a batch of sixteen pays
--   them once.
-- * One by one otherwise: each item is one asr_append_fresh, applied in (tenant, session,
--   arrival) order, so that two appends to one session apply in arrival order, each on the
--   state the one before it left.
-- Both lock session rows in (tenant, session) order, so two batches in flight cannot
-- deadlock.
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
#variable_conflict use_column
DECLARE
    i integer;
    v_tenant text := p_tenants[1];
    v_events jsonb[];
    v_together boolean;
    v_xact bigint;
BEGIN
    SELECT count(*) = count(DISTINCT u.sid) AND bool_and(u.t = v_tenant)
           AND bool_and(u.k IS NULL) AND bool_and(u.sk IS NULL)
      INTO v_together
      FROM unnest(p_tenants, p_sessions, p_idem_keys, p_snapshot_kinds) AS u(t, sid, k, sk);
    IF v_together THEN
        PERFORM set_config('app.tenant_id', v_tenant, true);
        v_events := p_events::jsonb[];
    END IF;

    IF NOT coalesce(v_together, false) THEN
        FOR i IN
            SELECT u.ord FROM unnest(p_tenants, p_sessions) WITH ORDINALITY AS u(t, sid, ord)
            ORDER BY u.t, u.sid, u.ord
        LOOP
            RETURN QUERY SELECT i, r.* FROM asr_append_fresh(
                p_tenants[i], p_sessions[i], p_expected_seqs[i], p_expected_versions[i],
                p_nows[i], p_events[i]::jsonb,
                p_idem_keys[i], p_idem_hashes[i], p_idem_expires[i], p_metadatas[i]::jsonb,
                p_snapshot_kinds[i], p_snapshot_states[i], p_snapshot_hashes[i]
            ) AS r;
        END LOOP;
        RETURN;
    END IF;

    -- LockRows runs above the sort: the rows are locked in session order.
    PERFORM FROM sessions AS x
     WHERE x.tenant_id = v_tenant AND x.session_id = ANY (p_sessions)
     ORDER BY x.session_id
       FOR UPDATE;
    v_xact := pg_current_xact_id()::text::bigint;
    -- What asr_append_fresh does for one item, for all of them: one UPDATE, then the events
    -- of every appended item by one call of asr_insert_event_sets (one INSERT for them all,
    -- and the webhook outbox). The rows of the items that are not appended are read after
    -- the lock, so they are current.
    RETURN QUERY
    WITH items AS (
        SELECT u.ord::integer AS ord, u.sid, u.es, u.ev, u.now, u.events, u.meta::jsonb AS meta,
               coalesce(jsonb_array_length(u.events), 0) AS n
          FROM unnest(p_sessions, p_expected_seqs, p_expected_versions, p_nows, v_events,
                      p_metadatas) WITH ORDINALITY AS u(sid, es, ev, now, events, meta, ord)
    ), updated AS (
        UPDATE sessions AS x
           SET last_seq = x.last_seq + i.n, version = x.version + 1, updated_at = i.now,
               metadata = coalesce(i.meta, x.metadata)
          FROM items AS i
         WHERE x.tenant_id = v_tenant AND x.session_id = i.sid
           AND (i.es IS NULL OR x.last_seq = i.es)
           AND (i.ev IS NULL OR x.version = i.ev)
        RETURNING i.ord, i.n, i.events, x.*
    ), inserted AS (
        SELECT p.session_id, p.positions
          FROM (SELECT array_agg(u.session_id ORDER BY u.ord) AS sids,
                       array_agg(u.last_seq ORDER BY u.ord) AS lasts,
                       array_agg(u.updated_at ORDER BY u.ord) AS nows,
                       array_agg(u.events ORDER BY u.ord) AS events
                  FROM updated AS u) AS a,
               asr_insert_event_sets(v_tenant, a.sids, a.lasts, v_xact, a.nows, a.events) AS p
    )
    SELECT u.ord, true, u.last_seq - u.n + 1, u.tenant_id, u.session_id, u.root_session_id,
           u.parent_session_id, u.forked_from_seq, u.status, u.metadata, u.agent, u.binding,
           u.last_seq, u.version, u.active_run_id, u.created_at, u.updated_at, v_xact,
           coalesce(p.positions, '{}')
      FROM updated AS u
      LEFT JOIN inserted AS p ON p.session_id = u.session_id
    UNION ALL
    SELECT i.ord, false, NULL::bigint, x.tenant_id, x.session_id, x.root_session_id,
           x.parent_session_id, x.forked_from_seq, x.status, x.metadata, x.agent, x.binding,
           x.last_seq, x.version, x.active_run_id, x.created_at, x.updated_at, NULL::bigint,
           NULL::bigint[]
      FROM items AS i
      JOIN sessions AS x ON x.tenant_id = v_tenant AND x.session_id = i.sid
     WHERE NOT EXISTS (SELECT FROM updated AS u WHERE u.ord = i.ord);
END
$fn$;
