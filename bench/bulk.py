"""Fast set-up of long ledgers: server-side INSERT ... SELECT, never row by row.

The rows are the benchmark's STEP_END events (about 560 bytes of JSON each), written
straight into the store's tables the way the store writes them (gapless seqs, `last_seq`
bumped to match, global positions from the identity on PostgreSQL and from `counters` on
SQLite). Only set-up uses this; every measured write goes through the store's API.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.base import NO_TENANT
from app.store.stores import Stores
from bench.common import EVENT_TYPE, payload

_TEMPLATE = json.dumps(payload(0), separators=(",", ":"))

_PG_EVENTS = text(
    """
    INSERT INTO session_events
        (tenant_id, session_id, seq, event_id, xact_id, type, run_id, turn_id, payload,
         created_at)
    SELECT :tenant, :session, g, gen_random_uuid()::text, NULL, :type, 'run_bench',
           'turn_' || g, CAST(:template AS jsonb) || jsonb_build_object('turn', g), now()
    FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g
    """
)

_SQLITE_EVENTS = text(
    """
    INSERT INTO session_events
        (tenant_id, session_id, seq, event_id, position, xact_id, type, run_id, turn_id,
         payload, created_at)
    WITH RECURSIVE g(x) AS (SELECT :lo UNION ALL SELECT x + 1 FROM g WHERE x < :hi)
    SELECT :tenant, :session, x, asr_uuid4(), :base + x, NULL, :type, 'run_bench',
           'turn_' || x, json_set(:template, '$.turn', x), :now
    FROM g
    """
)

_BUMP = text(
    "UPDATE sessions SET last_seq = :hi WHERE tenant_id = :tenant AND session_id = :session"
)


_SQLITE_POSITIONS = text(
    "INSERT INTO counters (name, value) VALUES ('event_position', :n)"
    " ON CONFLICT (name) DO UPDATE SET value = value + :n RETURNING value"
)


async def _reserve_positions(conn: AsyncConnection, n: int) -> int:
    """SQLite: reserve `n` global positions as the store does (its `counters` row); the
    highest is returned."""
    return int((await conn.execute(_SQLITE_POSITIONS, {"n": n})).scalar_one())


def _sqlite_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


async def fill(
    store: Stores,
    tenant: str,
    session: str,
    lo: int,
    hi: int,
    *,
    event: tuple[str, str] | None = None,
) -> None:
    """Insert events lo..hi (inclusive) of an existing session whose last seq is lo - 1:
    the benchmark's STEP_END events, or `event` = (type, payload JSON text)."""
    if hi < lo:
        return
    kind, template = event or (str(EVENT_TYPE), _TEMPLATE)
    params = {
        "tenant": tenant,
        "session": session,
        "lo": lo,
        "hi": hi,
        "type": kind,
        "template": template,
    }
    chunk = 50_000
    for start in range(lo, hi + 1, chunk):
        end = min(hi, start + chunk - 1)
        async with store.database.write(tenant) as conn:
            part = {**params, "lo": start, "hi": end}
            if store.dialect == "postgresql":
                await conn.execute(_PG_EVENTS, part)
            else:
                top = await _reserve_positions(conn, end - start + 1)
                base = top - (end - start + 1) - start + 1
                await conn.execute(_SQLITE_EVENTS, {**part, "base": base, "now": _sqlite_now()})
            await conn.execute(_BUMP, part)


_PG_SCALE_SESSIONS = text(
    """
    INSERT INTO sessions
        (tenant_id, session_id, root_session_id, parent_session_id, forked_from_seq, status,
         metadata, agent, binding, last_seq, version, active_run_id, created_at, updated_at)
    SELECT :tenant, 'scale-' || s, 'scale-' || s, NULL, NULL, 'idle', '{}', '{}', '{}', :per,
           1, NULL, now(), now()
    FROM generate_series(CAST(:lo AS int), CAST(:hi AS int)) AS s
    """
)

_PG_SCALE_EVENTS = text(
    """
    INSERT INTO session_events
        (tenant_id, session_id, seq, event_id, xact_id, type, run_id, turn_id, payload,
         created_at)
    SELECT :tenant, 'scale-' || s, g, gen_random_uuid()::text, NULL, :type, 'run_bench',
           'turn_' || g, CAST(:template AS jsonb) || jsonb_build_object('turn', g), now()
    FROM generate_series(CAST(:lo AS int), CAST(:hi AS int)) AS s,
         generate_series(1, CAST(:per AS int)) AS g
    """
)

_SQLITE_SCALE_SESSIONS = text(
    """
    INSERT INTO sessions
        (tenant_id, session_id, root_session_id, parent_session_id, forked_from_seq, status,
         metadata, agent, binding, last_seq, version, active_run_id, created_at, updated_at)
    WITH RECURSIVE g(s) AS (SELECT :lo UNION ALL SELECT s + 1 FROM g WHERE s < :hi)
    SELECT :tenant, 'scale-' || s, 'scale-' || s, NULL, NULL, 'idle', '{}', '{}', '{}', :per,
           1, NULL, :now, :now
    FROM g
    """
)

_SQLITE_SCALE_EVENTS = text(
    """
    INSERT INTO session_events
        (tenant_id, session_id, seq, event_id, position, xact_id, type, run_id, turn_id,
         payload, created_at)
    WITH RECURSIVE
        ss(s) AS (SELECT :lo UNION ALL SELECT s + 1 FROM ss WHERE s < :hi),
        gg(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM gg WHERE g < :per)
    SELECT :tenant, 'scale-' || s, g, asr_uuid4(), :base + (s - :lo) * :per + g, NULL, :type,
           'run_bench', 'turn_' || g, json_set(:template, '$.turn', g), :now
    FROM ss, gg
    """
)


async def scale(store: Stores, tenant: str, *, sessions: int, events: int) -> None:
    """`sessions` sessions of `events // sessions` events each, in chunks of transactions."""
    per = max(1, events // sessions)
    step = max(1, 50_000 // per)
    for lo in range(1, sessions + 1, step):
        hi = min(sessions, lo + step - 1)
        params = {
            "tenant": tenant,
            "lo": lo,
            "hi": hi,
            "per": per,
            "type": str(EVENT_TYPE),
            "template": _TEMPLATE,
        }
        async with store.database.write(tenant) as conn:
            if store.dialect == "postgresql":
                await conn.execute(_PG_SCALE_SESSIONS, params)
                await conn.execute(_PG_SCALE_EVENTS, params)
            else:
                now = _sqlite_now()
                n = (hi - lo + 1) * per
                base = await _reserve_positions(conn, n) - n
                await conn.execute(_SQLITE_SCALE_SESSIONS, {**params, "now": now})
                await conn.execute(_SQLITE_SCALE_EVENTS, {**params, "base": base, "now": now})
    await analyze(store)


async def analyze(store: Stores, table: str = "") -> None:
    """`ANALYZE` one table (or, by default, all), as autovacuum would have by now.

    This machine runs PostgreSQL with autovacuum off, so a bench's database never has
    statistics unless the bench gathers them. Without them PostgreSQL takes a tenant's rows
    for a handful, and plans a lookup of a few sessions (`session_id = ANY (...)`) as a walk
    of all the tenant's sessions: a cost that grows with every session the bench makes, which
    no deployment pays past autovacuum's first look at the table. SQLite gets the same
    statement (its `ANALYZE` feeds its planner alike).
    """
    async with store.database.write(NO_TENANT) as conn:
        await conn.execute(text(f"ANALYZE {table}".rstrip()))
