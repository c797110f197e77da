"""Test and diagnosis gauges, served only with ASR_DEBUG_ENDPOINTS=true.

They answer the leak checks: after streams are opened and dropped, the open-stream
gauge, the bus's subscriptions and the process's asyncio tasks must return to where they
were. Counts only; no tenant data beyond tenant ids.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from fastapi import APIRouter

from app.api.http.deps import BusDep, StreamSlotsDep

router = APIRouter(prefix="/debug", tags=["debug"], include_in_schema=False)


@router.get("/streams")
async def stream_gauges(slots: StreamSlotsDep, bus: BusDep) -> dict:
    tasks = asyncio.all_tasks()
    return {
        "open_streams": slots.total,
        "open_streams_by_tenant": slots.by_tenant(),
        "bus": bus.stats(),
        "tasks": len(tasks),
        "tasks_by_coroutine": dict(
            Counter(getattr(t.get_coro(), "__qualname__", "?") for t in tasks).most_common(10)
        ),
        "shutdown_watchers": sum(
            1 for t in tasks if getattr(t.get_coro(), "__name__", "") == "_shutdown_watcher"
        ),
    }
