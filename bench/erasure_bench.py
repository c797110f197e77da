"""Erasing a whole tenant of `tenant_sessions` sessions (10 events each), through `Eraser`,
next to the same rows deleted by bare SQL statements, table by table, in one transaction.

Each repetition builds two such tenants with `bulk.scale` (set-up, not measured), erases
one with the service's erasure (rows, receipt, the control message) and deletes the other
with the baseline's statements.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from sqlalchemy import text

from app.runtime.ports import LocalControl
from app.runtime.session.erasure import Eraser
from app.store.stores import Stores
from bench import bulk
from bench.common import Figure, Sizes, median

_TABLES = (
    "webhook_deliveries",
    "webhook_subscriptions",
    "schedule_fires",
    "schedules",
    "idempotency_keys",
    "runs",
    "session_snapshots",
    "session_events",
    "sessions",
    "api_keys",
    "tenants",
)
EVENTS_PER_SESSION = 10


async def _tenant(store: Stores, sessions: int) -> str:
    tenant = await store.accounts.create_tenant(f"bench-erase-{uuid.uuid4().hex[:8]}")
    await bulk.scale(
        store, tenant.tenant_id, sessions=sessions, events=sessions * EVENTS_PER_SESSION
    )
    return tenant.tenant_id


async def erase_tenant_figure(
    store: Stores, runtime: object, sizes: Sizes, log: Callable[[str], None]
) -> Figure:
    n = sizes.tenant_sessions
    eraser = Eraser(
        store.erasure,
        runtime,  # type: ignore[arg-type]
        workspaces=None,
        processes=None,
        control=LocalControl(),
    )
    values: list[float] = []
    baselines: list[float] = []
    for _ in range(sizes.repeats):
        erased, deleted = await _tenant(store, n), await _tenant(store, n)
        started = time.perf_counter()
        receipt = await eraser.erase_tenant(erased, requested_by="bench")
        values.append(time.perf_counter() - started)
        assert receipt.counts["sessions"] == n, receipt.counts
        started = time.perf_counter()
        async with store.database.write(deleted) as conn:
            for table in _TABLES:
                await conn.execute(
                    text(f"DELETE FROM {table} WHERE tenant_id = :t"), {"t": deleted}
                )
        baselines.append(time.perf_counter() - started)
        log(f"  erase_tenant_{n}: {values[-1]:.3f} s vs bare deletes {baselines[-1]:.3f} s")
    return Figure(
        name=f"erase_tenant_{n}",
        unit="s",
        value=median(values),
        baseline=median(baselines),
        baseline_label=f"bare DELETE per table ({n} sessions x {EVENTS_PER_SESSION} events)",
        higher_is_better=False,
        samples=values,
        baseline_samples=baselines,
        extra={"sessions": n, "events": n * EVENTS_PER_SESSION},
    )
