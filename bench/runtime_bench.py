"""Realistic sessions through the runtime's API: what a request pays.

The store benchmarks (store_bench.py) write STEP_END events, which fold to nothing, straight
into `Stores`. Here every event carries memory, as a real session's do: one
MEMORY_ITEMS_APPENDED with one 562-byte message item, written with
`SessionRuntime.append_items`, read with `list_events` and with `load` on a cold cache (a
replica that never served the session), forked with `fork`. Each figure stands next to the
same rows handled by the bare driver in the same run (bench/raw.py), with the same payload.

The 20,000-item session is bulk-filled in chunks with a cold `load` after each (so it holds
the automatic snapshots a session gets when it is resumed now and then), then its last
`tail` items arrive through `append_items`.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from app.assembly import runtime_over
from app.runtime.memory.items import normalize_items
from app.runtime.session import event_payloads as ev
from app.runtime.session.events import EventType
from app.store.stores import Stores
from bench import bulk
from bench.common import TEXT, Figure, Sizes, interleaved, median, per_call_ms
from bench.raw import RawPostgres, RawSqlite

Log = Callable[[str], None]

ITEM_BYTES = 562
# The filler's snapshots: one per this many events (a session resumed now and then).
SNAPSHOT_CHUNK = 2_000


def message_item() -> dict[str, Any]:
    """A user message whose JSON (compact) is ITEM_BYTES long."""
    item = {"type": "message", "role": "user", "content": ""}
    room = ITEM_BYTES - len(json.dumps(item, separators=(",", ":")))
    item["content"] = (TEXT * (room // len(TEXT) + 1))[:room]
    return normalize_items([item], max_inline_bytes=262_144)[0]


ITEM = message_item()
PAYLOAD = ev.MemoryItemsAppended(items=[ITEM]).event().payload
BODY = (str(EventType.MEMORY_ITEMS_APPENDED), json.dumps(PAYLOAD, separators=(",", ":")))


class RuntimeBench:
    def __init__(
        self,
        store: Stores,
        raw: RawPostgres | RawSqlite,
        tenant: str,
        sizes: Sizes,
    ) -> None:
        self.store = store
        self.runtime = runtime_over(store)
        self.raw = raw
        self.tenant = tenant
        self.sizes = sizes
        self.big = ""  # the fork_size-item session

    async def run(self, log: Log, *, appends: bool = True) -> list[Figure]:
        """Every figure; without `appends` (`--only runtime_reads`), only the big session's
        reads, cold load and forks, whose set-up alone is most of the time."""
        figures = [await self.append_seq(), await self.append_conc()] if appends else []
        started = time.perf_counter()
        await self.prepare()
        took = time.perf_counter() - started
        log(f"  set up a {self.sizes.fork_size}-item session in {took:.1f}s")
        figures += [await self.read_full(), await self.load_cold(), *await self.fork()]
        return figures

    async def _session(self, prefix: str) -> str:
        created = await self.runtime.create(
            self.tenant,
            session_id=f"{prefix}-{uuid.uuid4().hex[:12]}",
            metadata={},
            agent={},
            binding={},
        )
        return created.session.session_id

    async def _interleaved(
        self, a: Callable[[], Awaitable[float]], b: Callable[[], Awaitable[float]]
    ) -> tuple[list[float], list[float]]:
        return await interleaved(self.sizes.repeats, a, b)

    # ------------------------------------------------------------------ appends

    async def append_seq(self) -> Figure:
        n = self.sizes.seq_events

        async def ours() -> float:
            sid = await self._session("ra")
            await bulk.analyze(self.store, "sessions")
            started = time.perf_counter()
            for _ in range(n):
                await self.runtime.append_items(self.tenant, sid, [ITEM])
            return n / (time.perf_counter() - started)

        async def raw() -> float:
            started = time.perf_counter()
            await self.raw.insert_loop(self.tenant, f"rr-{uuid.uuid4().hex[:12]}", n, body=BODY)
            return n / (time.perf_counter() - started)

        xs, ys = await self._interleaved(ours, raw)
        return Figure(
            "rt_append_seq",
            "events/s",
            median(xs),
            median(ys),
            "raw driver INSERT+COMMIT loop, same payload",
            True,
            xs,
            ys,
            {"events": n, "item_bytes": ITEM_BYTES},
        )

    async def append_conc(self) -> Figure:
        s = self.sizes
        per_writer = s.conc_sessions // s.conc_writers
        total = s.conc_sessions * s.conc_events

        async def ours() -> float:
            sids = [await self._session("rc") for _ in range(s.conc_sessions)]
            await bulk.analyze(self.store, "sessions")

            async def writer(w: int) -> None:
                for sid in sids[w * per_writer : (w + 1) * per_writer]:
                    for _ in range(s.conc_events):
                        await self.runtime.append_items(self.tenant, sid, [ITEM])

            started = time.perf_counter()
            await asyncio.gather(*(writer(w) for w in range(s.conc_writers)))
            return total / (time.perf_counter() - started)

        async def raw() -> float:
            tag = uuid.uuid4().hex[:8]

            async def writer(w: int) -> None:
                for k in range(per_writer):
                    sid = f"rrc-{tag}-{w}-{k}"
                    await self.raw.insert_loop(self.tenant, sid, s.conc_events, w, body=BODY)

            started = time.perf_counter()
            await asyncio.gather(*(writer(w) for w in range(s.conc_writers)))
            return total / (time.perf_counter() - started)

        xs, ys = await self._interleaved(ours, raw)
        return Figure(
            "rt_append_conc",
            "events/s",
            median(xs),
            median(ys),
            f"raw driver INSERT+COMMIT loop, {s.conc_writers} connections",
            True,
            xs,
            ys,
            {"sessions": s.conc_sessions, "events_each": s.conc_events, "writers": s.conc_writers},
        )

    # ------------------------------------------------------------ loads, forks

    async def prepare(self) -> None:
        n, tail = self.sizes.fork_size, self.sizes.tail
        sid = await self._session("rbig")
        last = 1
        while last < n - tail:
            top = min(n - tail, last + SNAPSHOT_CHUNK)
            await bulk.fill(self.store, self.tenant, sid, last + 1, top, event=BODY)
            self.runtime._cache.clear()
            await self.runtime.load(self.tenant, sid)  # folds the chunk, keeps a snapshot
            last = top
        for _ in range(tail):
            await self.runtime.append_items(self.tenant, sid, [ITEM])
        self.big = sid

    async def read_full(self) -> Figure:
        n = self.sizes.fork_size

        async def ours() -> None:
            events = await self.runtime.list_events(self.tenant, self.big)
            assert len(events) == n

        async def raw() -> None:
            assert len(await self.raw.select_full(self.tenant, self.big)) == n

        calls = max(3, min(20, 100_000 // n))
        xs, ys = await self._interleaved(
            lambda: per_call_ms(ours, calls=calls), lambda: per_call_ms(raw, calls=calls)
        )
        return Figure(
            f"rt_read_full_{n}",
            "ms",
            median(xs),
            median(ys),
            "raw SELECT ... ORDER BY seq (payload decoded)",
            False,
            xs,
            ys,
        )

    async def load_cold(self) -> Figure:
        async def ours() -> None:
            self.runtime._cache.clear()  # a replica that never served this session
            loaded = await self.runtime.load(self.tenant, self.big)
            assert loaded.state.seq == loaded.session.last_seq

        async def raw() -> None:
            await self.raw.load_state(self.tenant, self.big)

        xs, ys = await self._interleaved(
            lambda: per_call_ms(ours, calls=5), lambda: per_call_ms(raw, calls=5)
        )
        return Figure(
            f"rt_load_cold_{self.sizes.fork_size}",
            "ms",
            median(xs),
            median(ys),
            "raw SELECT session + snapshot + tail (decoded)",
            False,
            xs,
            ys,
        )

    async def fork(self) -> list[Figure]:
        """`latest`: the source as this replica serves it (cached); `mid`: a cold cache, at
        half the ledger."""
        await self.raw.match_size()
        record = await self.runtime.get(self.tenant, self.big)
        figures = []
        for label, at, warm in (
            ("latest", record.last_seq, True),
            ("mid", record.last_seq // 2, False),
        ):

            async def ours(at: int = at, warm: bool = warm) -> float:
                if warm:
                    await self.runtime.load(self.tenant, self.big)
                else:
                    self.runtime._cache.clear()
                started = time.perf_counter()
                await self.runtime.fork(self.tenant, self.big, at_seq=at)
                return (time.perf_counter() - started) * 1000

            async def raw(at: int = at) -> float:
                started = time.perf_counter()
                await self.raw.fork(self.tenant, self.big, at, f"rf-{uuid.uuid4().hex[:12]}")
                return (time.perf_counter() - started) * 1000

            await ours()  # warm-up
            await raw()
            xs, ys = await self._interleaved(ours, raw)
            figures.append(
                Figure(
                    f"rt_fork_{label}_{record.last_seq}",
                    "ms",
                    median(xs),
                    median(ys),
                    "raw server-side INSERT ... SELECT of the events",
                    False,
                    xs,
                    ys,
                    {"at_seq": at, "cached_source": warm},
                )
            )
        return figures
