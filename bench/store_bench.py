"""Store benchmarks: appends, loads and forks through `Stores`, each next to
the same work done with the bare driver (bench/raw.py) in the same run."""

from __future__ import annotations

import asyncio
import functools
import os
import time
import uuid
from collections.abc import Awaitable, Callable

from app.assembly import runtime_over
from app.runtime.ports import NewSession
from app.runtime.session.events import EventType, NewEvent
from app.runtime.webhooks.records import NewWebhook
from app.runtime.webhooks.signing import new_secret
from app.settings import Settings
from app.store.engine import make_engine
from app.store.stores import open_stores
from bench import bulk
from bench.common import Figure, Sizes, interleaved, median, new_event, per_call_ms
from bench.raw import RawPostgres, RawSqlite, raw_for

Log = Callable[[str], None]


def _bench_webhook() -> NewWebhook:
    return NewWebhook(
        webhook_id=f"wh_bench_{uuid.uuid4().hex[:8]}",
        url="https://example.com/bench",
        event_types=["*"],
        session_id=None,
        metadata_filter=None,
        description="bench",
        secret=new_secret(),
    )


class StoreBench:
    def __init__(self, url: str, sizes: Sizes, log: Log) -> None:
        self.url = url
        self.sizes = sizes
        self.log = log
        settings = Settings(database_url=url)
        self.engine = make_engine(settings)
        self.store = open_stores(self.engine)
        self.runtime = runtime_over(self.store)
        self.raw: RawPostgres | RawSqlite = raw_for(url, settings.sqlite_synchronous)
        self.tenant = ""
        self.loaded: dict[int, str] = {}  # ledger length -> session id (load/fork set-up)
        self.small_table: dict[str, Figure] = {}

    async def open(self) -> None:
        tenant = await self.store.accounts.create_tenant(f"bench-{uuid.uuid4().hex[:8]}")
        self.tenant = tenant.tenant_id
        if os.environ.get("ASR_BENCH_WEBHOOK") == "1":
            # The cost of the webhook outbox: the tenant has an active subscription to every
            # event type, so each append also writes one outbox row (migration 0010).
            await self.store.webhooks.create_webhook(self.tenant, _bench_webhook())
        await self.raw.open(max(16, self.sizes.conc_writers))

    async def close(self) -> None:
        await self.raw.close()
        await self.engine.dispose()

    async def new_session(self, prefix: str = "s") -> str:
        sid = f"{prefix}-{uuid.uuid4().hex[:12]}"
        await self.store.ledger.create_session(
            self.tenant,
            session=NewSession(session_id=sid, metadata={}, agent={}, binding={}),
            events=[NewEvent(EventType.SESSION_CREATED, {"session_id": sid})],
        )
        return sid

    async def _repeat(self, fn: Callable[[], Awaitable[float]]) -> list[float]:
        return [await fn() for _ in range(self.sizes.repeats)]

    # ------------------------------------------------------------------ appends

    async def append_seq(self, name: str = "append_seq") -> Figure:
        n = self.sizes.seq_events

        async def store_once() -> float:
            sid = await self.new_session()
            started = time.perf_counter()
            for i in range(n):
                await self.store.ledger.append_events(self.tenant, sid, events=[new_event(i)])
            return n / (time.perf_counter() - started)

        async def raw_once() -> float:
            started = time.perf_counter()
            await self.raw.insert_loop(self.tenant, f"raw-{uuid.uuid4().hex[:12]}", n)
            return n / (time.perf_counter() - started)

        store_s, raw_s = await self._interleaved(store_once, raw_once)
        return Figure(
            name,
            "events/s",
            median(store_s),
            median(raw_s),
            "raw driver INSERT+COMMIT loop",
            True,
            store_s,
            raw_s,
            {"events": n, "payload_bytes": _payload_bytes()},
        )

    async def _interleaved(
        self, a: Callable[[], Awaitable[float]], b: Callable[[], Awaitable[float]]
    ) -> tuple[list[float], list[float]]:
        return await interleaved(self.sizes.repeats, a, b)

    async def append_conc(self) -> Figure:
        s = self.sizes
        sessions_per_writer = s.conc_sessions // s.conc_writers
        total = s.conc_sessions * s.conc_events

        async def store_once() -> float:
            sids = [await self.new_session("c") for _ in range(s.conc_sessions)]

            async def writer(w: int) -> None:
                for sid in sids[w * sessions_per_writer : (w + 1) * sessions_per_writer]:
                    for i in range(s.conc_events):
                        await self.store.ledger.append_events(
                            self.tenant, sid, events=[new_event(i)]
                        )

            started = time.perf_counter()
            await asyncio.gather(*(writer(w) for w in range(s.conc_writers)))
            return total / (time.perf_counter() - started)

        async def raw_once() -> float:
            tag = uuid.uuid4().hex[:8]

            async def writer(w: int) -> None:
                for k in range(sessions_per_writer):
                    sid = f"rawc-{tag}-{w}-{k}"
                    if isinstance(self.raw, RawSqlite):
                        await self.raw.insert_loop(self.tenant, sid, s.conc_events, w)
                    else:
                        await self.raw.insert_loop(self.tenant, sid, s.conc_events)

            started = time.perf_counter()
            await asyncio.gather(*(writer(w) for w in range(s.conc_writers)))
            return total / (time.perf_counter() - started)

        store_s, raw_s = await self._interleaved(store_once, raw_once)
        return Figure(
            "append_conc",
            "events/s",
            median(store_s),
            median(raw_s),
            f"raw driver INSERT+COMMIT loop, {s.conc_writers} connections",
            True,
            store_s,
            raw_s,
            {"sessions": s.conc_sessions, "events_each": s.conc_events, "writers": s.conc_writers},
        )

    async def append_batch(self) -> list[Figure]:
        s = self.sizes
        total = s.batch_size * s.batch_count

        async def store_once() -> float:
            sid = await self.new_session("b")
            started = time.perf_counter()
            for b in range(s.batch_count):
                events = [new_event(b * s.batch_size + i) for i in range(s.batch_size)]
                await self.store.ledger.append_events(self.tenant, sid, events=events)
            return total / (time.perf_counter() - started)

        async def many_once() -> float:
            started = time.perf_counter()
            sid = f"rawb-{uuid.uuid4().hex[:12]}"
            await self.raw.insert_batches(self.tenant, sid, s.batch_size, s.batch_count)
            return total / (time.perf_counter() - started)

        store_s, many_s = await self._interleaved(store_once, many_once)
        figures = [
            Figure(
                "append_batch",
                "events/s",
                median(store_s),
                median(many_s),
                f"raw executemany, {s.batch_size} events per transaction",
                True,
                store_s,
                many_s,
                {"events_per_transaction": s.batch_size, "transactions": s.batch_count},
            )
        ]
        if isinstance(self.raw, RawPostgres):
            raw = self.raw

            async def copy_once() -> float:
                started = time.perf_counter()
                sid = f"rawp-{uuid.uuid4().hex[:12]}"
                await raw.copy_batches(self.tenant, sid, s.batch_size, s.batch_count)
                return total / (time.perf_counter() - started)

            copy_s = await self._repeat(copy_once)
            figures.append(
                Figure(
                    "append_batch_vs_copy",
                    "events/s",
                    median(store_s),
                    median(copy_s),
                    f"raw COPY, {s.batch_size} events per transaction",
                    True,
                    store_s,
                    copy_s,
                )
            )
        return figures

    # -------------------------------------------------------------------- loads

    async def prepare_loads(self) -> None:
        """Sessions of each load size (and a small one): bulk-filled, then the runtime's own
        load writes its automatic snapshot, then `tail` more events arrive through the store
        API, as a live session looks between two snapshots."""
        s = self.sizes
        for n in (s.small_session, *s.load_sizes):
            started = time.perf_counter()
            sid = await self.new_session(f"l{n}")
            if n == s.small_session:
                await self.store.ledger.append_events(
                    self.tenant, sid, events=[new_event(i) for i in range(n - 1)]
                )
            else:
                await bulk.fill(self.store, self.tenant, sid, 2, n - s.tail)
                self.runtime._cache.clear()
                await self.runtime.load(self.tenant, sid)  # folds all, writes the snapshot
                await self.store.ledger.append_events(
                    self.tenant, sid, events=[new_event(i) for i in range(s.tail)]
                )
            self.loaded[n] = sid
            self.log(f"  set up a {n}-event session in {time.perf_counter() - started:.1f}s")

    def _calls(self, n: int) -> int:
        return max(3, min(50, 200_000 // max(n, 1)))

    async def load_full(self) -> list[Figure]:
        figures = []
        for n in self.sizes.load_sizes:
            sid = self.loaded[n]
            calls = self._calls(n)

            async def store_call(sid: str = sid, n: int = n) -> None:
                events = await self.store.ledger.list_events(self.tenant, sid)
                assert len(events) == n

            async def raw_call(sid: str = sid, n: int = n) -> None:
                rows = await self.raw.select_full(self.tenant, sid)
                assert len(rows) == n

            xs, ys = await self._interleaved(
                functools.partial(per_call_ms, store_call, calls=calls),
                functools.partial(per_call_ms, raw_call, calls=calls),
            )
            figures.append(
                Figure(
                    f"load_full_{n}",
                    "ms",
                    median(xs),
                    median(ys),
                    "raw SELECT ... ORDER BY seq (payload decoded)",
                    False,
                    xs,
                    ys,
                )
            )
        return figures

    async def _load_state_figure(self, n: int, name: str) -> Figure:
        sid = self.loaded[n]

        async def store_call() -> None:
            self.runtime._cache.clear()  # what a replica without this session cached does
            loaded = await self.runtime.load(self.tenant, sid)
            assert loaded.state.seq == loaded.session.last_seq

        async def raw_call() -> None:
            await self.raw.load_state(self.tenant, sid)

        xs, ys = await self._interleaved(
            lambda: per_call_ms(store_call, calls=50),
            lambda: per_call_ms(raw_call, calls=50),
        )
        return Figure(
            name,
            "ms",
            median(xs),
            median(ys),
            "raw SELECT session + snapshot + tail ORDER BY seq",
            False,
            xs,
            ys,
        )

    async def load_state(self) -> list[Figure]:
        s = self.sizes
        return [
            await self._load_state_figure(n, f"load_state_{n}")
            for n in (s.small_session, *s.load_sizes)
        ]

    # -------------------------------------------------------------------- forks

    async def fork(self) -> list[Figure]:
        n = self.sizes.fork_size
        src = self.loaded.get(n) or self.loaded[max(self.loaded)]
        record = await self.store.ledger.get_session(self.tenant, src)
        assert record is not None
        await self.raw.match_size()  # like with like: the raw copy goes into as large a table
        figures = []
        for label, at in (("latest", record.last_seq), ("mid", record.last_seq // 2)):

            async def store_once(at: int = at) -> float:
                child = f"f-{uuid.uuid4().hex[:12]}"
                forked = NewEvent(EventType.SESSION_FORKED, {"parent_session_id": src})
                started = time.perf_counter()
                await self.store.ledger.fork_session(
                    self.tenant,
                    src,
                    at_seq=at,
                    session=NewSession(session_id=child, metadata={}, agent={}, binding={}),
                    events=[forked],
                )
                return (time.perf_counter() - started) * 1000

            async def raw_once(at: int = at) -> float:
                started = time.perf_counter()
                await self.raw.fork(self.tenant, src, at, f"rf-{uuid.uuid4().hex[:12]}")
                return (time.perf_counter() - started) * 1000

            await store_once()  # warm-up
            await raw_once()
            xs, ys = await self._interleaved(store_once, raw_once)
            figures.append(
                Figure(
                    f"fork_{label}_{record.last_seq}",
                    "ms",
                    median(xs),
                    median(ys),
                    "raw server-side INSERT ... SELECT, into a table as large as the store's",
                    False,
                    xs,
                    ys,
                    {"at_seq": at},
                )
            )
        return figures

    # -------------------------------------------------------------------- scale

    async def scale(self, before: dict[str, Figure]) -> list[Figure]:
        """Fill the table to `scale_events` rows, then append_seq and load_state again; each
        figure's baseline is the same operation measured before on the small table."""
        s = self.sizes
        started = time.perf_counter()
        await bulk.scale(self.store, self.tenant, sessions=s.scale_sessions, events=s.scale_events)
        self.log(
            f"  bulk-loaded {s.scale_events} events over {s.scale_sessions} sessions"
            f" in {time.perf_counter() - started:.1f}s"
        )
        figures = []
        after = await self.append_seq("append_seq")
        figures.append(_versus(after, before.get("append_seq"), "scale_append_seq", True))
        for n in (s.small_session, max(s.load_sizes)):
            name = f"load_state_{n}"
            after = await self._load_state_figure(n, name)
            figures.append(_versus(after, before.get(name), f"scale_{name}", False))
        return figures


def _versus(after: Figure, before: Figure | None, name: str, higher: bool) -> Figure:
    return Figure(
        name,
        after.unit,
        after.value,
        before.value if before is not None else None,
        "same operation on the small table, earlier in this run",
        higher,
        after.samples,
        before.samples if before is not None else [],
        {"raw_now": after.baseline},
    )


def _payload_bytes() -> int:
    from bench.common import PAYLOAD_BYTES

    return PAYLOAD_BYTES
