"""What the webhook outbox costs an append: `python -m bench.webhook_outbox
[--db pg|sqlite] [--rounds N] [--block N]`.

On a loaded machine two separate bench runs differ by more than the outbox costs, so this
measures the cases interleaved in one process on one database, block by block: a tenant
without a subscription, and a tenant with an active subscription to every event type (one
outbox row per event); on SQLite also the outbox trigger switched off (the write path as
before migration 0010). PostgreSQL has no switch: since migration 0015 `asr_insert_events`
fills the outbox itself, after an index probe, and there is no trigger to turn off. Each
case's figure is the median of its blocks; the ratios to the first case are what to read.
Loopback only, bounded in size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.runtime.ports import NewSession
from app.runtime.webhooks.records import NewWebhook
from app.runtime.webhooks.signing import new_secret
from app.settings import Settings
from app.store.engine import make_engine
from app.store.stores import Stores, open_stores
from bench.common import create_database, drop_database, median, migrate, new_event

_SQLITE_TRIGGER_SQL = text(
    "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'webhook_outbox'"
)


async def _sqlite_trigger(store: Stores) -> str:
    """SQLite's trigger as the migration made it (to put it back after dropping it)."""
    if store.dialect == "postgresql":
        return ""
    async with store.database.engine.connect() as conn:
        return str((await conn.execute(_SQLITE_TRIGGER_SQL)).scalar_one())


async def _switch(store: Stores, on: bool, sqlite_trigger: str) -> None:
    async with store.database.engine.begin() as conn:
        if on:
            await conn.execute(text(sqlite_trigger))
        else:
            await conn.execute(text("DROP TRIGGER IF EXISTS webhook_outbox"))


async def _block(store: Stores, tenant_id: str, n: int) -> float:
    sid = f"s-{uuid.uuid4().hex[:12]}"
    await store.ledger.create_session(
        tenant_id, session=NewSession(session_id=sid, metadata={}, agent={}, binding={}), events=[]
    )
    started = time.perf_counter()
    for i in range(n):
        await store.ledger.append_events(tenant_id, sid, events=[new_event(i)])
    return n / (time.perf_counter() - started)


async def main(db: str, rounds: int, block: int, *, async_commit: bool) -> dict[str, float]:
    workdir = Path(tempfile.mkdtemp(prefix="asr-bench-outbox-"))
    url = await create_database(db, workdir)
    try:
        await migrate(url)
        if async_commit and db == "pg":
            # Without the wait for the WAL flush, an append's cost is its CPU work, and
            # the trigger's share of it shows instead of drowning in a slow disk's fsync.
            name = make_url(url).database
            admin = make_engine(Settings(database_url=url))
            async with admin.begin() as conn:
                await conn.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit = off'))
            await admin.dispose()
        engine = make_engine(Settings(database_url=url))
        store = open_stores(engine)
        sqlite_trigger = await _sqlite_trigger(store)
        plain = (await store.accounts.create_tenant(f"bench-{uuid.uuid4().hex[:8]}")).tenant_id
        subscribed = (await store.accounts.create_tenant(f"bench-{uuid.uuid4().hex[:8]}")).tenant_id
        hook = NewWebhook("wh_bench", "https://example.com/b", ["*"], None, None, None, "")
        await store.webhooks.create_webhook(subscribed, replace(hook, secret=new_secret()))
        sqlite = store.dialect != "postgresql"
        samples: dict[str, list[float]] = {"on_no_subscription": [], "on_subscribed": []}
        if sqlite:
            samples = {"off": [], **samples}
        for r in range(rounds):
            if sqlite:
                await _switch(store, False, sqlite_trigger)
                samples["off"].append(await _block(store, plain, block))
                await _switch(store, True, sqlite_trigger)
            samples["on_no_subscription"].append(await _block(store, plain, block))
            samples["on_subscribed"].append(await _block(store, subscribed, block))
            print(f"round {r + 1}/{rounds}", file=sys.stderr, flush=True)
        await engine.dispose()
    finally:
        await drop_database(url)
    figures = {case: median(values) for case, values in samples.items()}
    first, *others = figures
    return {
        **{f"{k}_events_per_s": round(v, 1) for k, v in figures.items()},
        **{f"{k}_ratio": round(figures[k] / figures[first], 3) for k in others},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("pg", "sqlite"), default="pg")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--block", type=int, default=200)
    parser.add_argument(
        "--async-commit", action="store_true", help="PostgreSQL: synchronous_commit = off"
    )
    args = parser.parse_args()
    backend = "sqlite" if args.db == "sqlite" else "pg"
    result = asyncio.run(main(backend, args.rounds, args.block, async_commit=args.async_commit))
    print(json.dumps({"db": args.db, "async_commit": args.async_commit, **result}, indent=2))
