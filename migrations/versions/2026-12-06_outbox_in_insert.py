"""The webhook outbox is filled by `asr_insert_events`, not by a trigger (issue #21).

Migration 0010 filled `webhook_deliveries` from a statement-level AFTER INSERT trigger on
`session_events` with a transition table. PostgreSQL fills a transition table with every row
the statement inserts, whoever subscribes: a fork's 20,000-row copy wrote 14 MB of it to a
temporary file, and every append paid the trigger's call and its tuplestore (7-18 µs of an
append's 40-60 µs of server time, timed in a PL/pgSQL loop). Since migration 0014 every
event PostgreSQL stores is inserted by `asr_insert_events` (tests/store/test_event_columns.py
fails otherwise), so that function now probes for an active subscription of the tenant after
its insert and, only then, calls `asr_webhook_outbox(tenant, session, first, last)` for the
events it inserted (a fork's copied prefix is never among them). The outbox still commits
exactly with its events. SQLite keeps its row trigger (no transition table there).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

from app.store.postgres.install import install

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TRIGGER = (
    "CREATE TRIGGER webhook_outbox AFTER INSERT ON session_events"
    " REFERENCING NEW TABLE AS asr_new_events"
    " FOR EACH STATEMENT EXECUTE FUNCTION asr_webhook_outbox()"
)

# 0014's two functions, for the downgrade.
_PREVIOUS_OUTBOX = """
CREATE OR REPLACE FUNCTION asr_webhook_outbox() RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
DECLARE
    v_tenant text;
BEGIN
    SELECT e.tenant_id INTO v_tenant FROM asr_new_events AS e LIMIT 1;
    IF NOT EXISTS (
        SELECT 1 FROM webhook_subscriptions AS w
        WHERE w.tenant_id = v_tenant AND w.state = 'active'
    ) THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_deliveries (
        tenant_id, webhook_id, session_id, seq, event_id, event_type, status, attempts,
        next_attempt_at, created_at
    )
    SELECT e.tenant_id, w.webhook_id, e.session_id, e.seq, e.event_id, e.type, 'pending', 0,
           e.created_at, e.created_at
    FROM asr_new_events AS e
    JOIN sessions AS s ON s.tenant_id = e.tenant_id AND s.session_id = e.session_id
    JOIN webhook_subscriptions AS w ON w.tenant_id = e.tenant_id AND w.state = 'active'
    WHERE (w.event_types ? e.type OR w.event_types ? '*')
      AND (w.session_id IS NULL OR w.session_id = e.session_id)
      AND (w.metadata_filter IS NULL OR s.metadata @> w.metadata_filter)
      AND (s.forked_from_seq IS NULL OR e.seq > s.forked_from_seq)
    ORDER BY e.seq;
    RETURN NULL;
END
$fn$;
"""

_PREVIOUS_INSERT = """
CREATE OR REPLACE FUNCTION asr_insert_events(
    p_tenant text, p_session text, p_last_seq bigint, p_xact bigint, p_now timestamptz,
    p_events jsonb, p_copy_from text DEFAULT NULL, p_copy_upto bigint DEFAULT 0
) RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $fn$
DECLARE
    n integer := coalesce(jsonb_array_length(p_events), 0);
    v_positions bigint[];
BEGIN
    IF p_copy_from IS NOT NULL AND p_copy_upto > 0 THEN
        INSERT INTO session_events AS e (
            tenant_id, session_id, seq, event_id, xact_id, type, run_id, turn_id, payload,
            created_at
        )
        SELECT c.tenant_id, p_session, c.seq, gen_random_uuid()::text, p_xact, c.type,
               c.run_id, c.turn_id, c.payload, c.created_at
          FROM session_events AS c
         WHERE c.tenant_id = p_tenant AND c.session_id = p_copy_from AND c.seq <= p_copy_upto
         ORDER BY c.seq;
    END IF;
    IF n = 0 THEN
        RETURN '{}';
    END IF;
    WITH inserted AS (
        INSERT INTO session_events AS e (
            tenant_id, session_id, seq, event_id, xact_id, type, run_id, turn_id, payload,
            created_at
        )
        SELECT p_tenant, p_session, p_last_seq - n + u.ord, u.v->>'id', p_xact, u.v->>'type',
               u.v->>'run_id', u.v->>'turn_id', u.v->'payload', p_now
        FROM jsonb_array_elements(p_events) WITH ORDINALITY AS u(v, ord)
        ORDER BY u.ord
        RETURNING e.seq, e.position
    )
    SELECT array_agg(i.position ORDER BY i.seq) INTO v_positions FROM inserted AS i;
    RETURN v_positions;
END
$fn$;
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS webhook_outbox ON session_events")
        op.execute("DROP FUNCTION IF EXISTS asr_webhook_outbox()")
        install(op.execute)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS asr_webhook_outbox(text, text, bigint, bigint)")
        op.execute(_PREVIOUS_OUTBOX)
        op.execute(_PREVIOUS_INSERT)
        op.execute(_TRIGGER)
