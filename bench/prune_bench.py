"""Pruning a session of `prune_events` events: the events up to its snapshot replaced by one
HISTORY_PRUNED marker through `SessionRuntime.prune` (the row lock, the facts, the deletes
and the marker's insert through the backend's one write path), next to the bare DELETE of
the same prefix in one transaction.

Each repetition builds two such sessions (set-up, not measured: `bulk.fill`, then a save
that writes the snapshot, then a tail of `tail` events), prunes one through the runtime and
deletes the other's prefix with the baseline's statement.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from sqlalchemy import text

from app.runtime.session.service import SessionRuntime
from app.store.stores import Stores
from bench import bulk
from bench.common import Figure, Sizes, median

_BARE = text("DELETE FROM session_events WHERE tenant_id = :t AND session_id = :s AND seq <= :cut")


async def _session(
    store: Stores, runtime: SessionRuntime, tenant: str, n: int, tail: int
) -> tuple[str, int]:
    """A session of `n` events up to a save, then `tail` more: (its id, the save's seq)."""
    sid = f"prune-{uuid.uuid4().hex[:12]}"
    await runtime.create(tenant, session_id=sid, metadata={}, agent={}, binding={})
    await bulk.fill(store, tenant, sid, 2, n - 1)
    runtime.forget(tenant, sid)
    saved = await runtime.save(tenant, sid)
    await bulk.fill(store, tenant, sid, saved.session.last_seq + 1, saved.session.last_seq + tail)
    runtime.forget(tenant, sid)
    return sid, saved.session.last_seq


async def prune_figure(
    store: Stores, runtime: SessionRuntime, sizes: Sizes, log: Callable[[str], None]
) -> Figure:
    n, tail = sizes.prune_events, sizes.tail
    tenant = (await store.accounts.create_tenant(f"bench-prune-{uuid.uuid4().hex[:8]}")).tenant_id
    values: list[float] = []
    baselines: list[float] = []
    for _ in range(sizes.repeats):
        pruned, cut = await _session(store, runtime, tenant, n, tail)
        bare, cut_bare = await _session(store, runtime, tenant, n, tail)
        started = time.perf_counter()
        outcome = await runtime.prune(tenant, pruned)
        values.append(time.perf_counter() - started)
        assert outcome.cut_seq == cut and outcome.events_removed == cut, outcome
        started = time.perf_counter()
        async with store.database.write(tenant) as conn:
            await conn.execute(_BARE, {"t": tenant, "s": bare, "cut": cut_bare})
        baselines.append(time.perf_counter() - started)
        log(f"  prune_{n}: {values[-1]:.3f} s vs bare DELETE {baselines[-1]:.3f} s")
    return Figure(
        name=f"prune_{n}",
        unit="s",
        value=median(values),
        baseline=median(baselines),
        baseline_label=f"bare DELETE of the same {n}-event prefix",
        higher_is_better=False,
        samples=values,
        baseline_samples=baselines,
        extra={"events": n, "tail": tail},
    )
