"""Group commit for appends on PostgreSQL: concurrent appends share one call and one commit.

With many writers, each append's own commit (and its WAL flush, and its round trip) is what
the database spends its time on. Appends go out when `_may_send` says so: when no call is in
flight, or when a second call is free and at least as many appends wait as the call in
flight carries. Otherwise they queue, and the call in flight takes them when it finishes.
So a lone writer never waits, and two writers still go side by side, alone
(`asr_append_fresh`: `asr_append_events` without the write-token check, which an append
whose event ids were just made cannot need); under many writers the two calls in flight are
of like size, and the database works on one while this process readies the next, where a
second call of one or two appends used to pay a whole call for them. What is queued goes
out as one `asr_append_batch` (`sql/append_batch.sql`, up to `max_batch` appends), which
skips the write-token check as a lone append does: a batch is only ever a first attempt. Two
calls in flight, not more: with 16 writers, more calls meant more commits and fewer shared
ones, and less throughput on the 2-core benchmark machine. Every item is the same
conditional append, and each caller gets its own row back — so results, refusals and
errors are per append, as if alone. Each caller returns only once its append is committed.

If a batch call fails for any reason but an item's own refusal (which the function reports
per item), its items are retried one by one with `asr_append_events`, so one item's failure
is never another's. That retry is safe even when the batch did commit and only its reply was
lost: each item's event ids are its write token, and an append whose first event id is
already in the ledger answers with what it wrote instead of writing again.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app.store.postgres.calls import APPEND_EVENTS, APPEND_FRESH, APPEND_PARAMS, call, named_call

# An item's arguments are asr_append_events' (APPEND_PARAMS, in that order); in a batch each
# becomes one array of per-item values, named as asr_append_batch names them.
_BATCH_PARAMS = (
    "p_tenants",
    "p_sessions",
    "p_expected_seqs",
    "p_expected_versions",
    "p_nows",
    "p_events",
    "p_idem_keys",
    "p_idem_hashes",
    "p_idem_expires",
    "p_metadatas",
    "p_snapshot_kinds",
    "p_snapshot_states",
    "p_snapshot_hashes",
)
assert len(_BATCH_PARAMS) == len(APPEND_PARAMS)
APPEND_BATCH = named_call("asr_append_batch", _BATCH_PARAMS)


class AppendGroups:
    """Queues appends while `max_inflight` calls are running and sends them together."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        in_transaction: bool,
        max_inflight: int = 2,
        max_batch: int = 64,
    ) -> None:
        self.engine = engine
        self.in_transaction = in_transaction
        self.max_inflight = max_inflight
        self.max_batch = max_batch
        self._inflight = 0
        self._items = 0  # appends in the calls in flight
        self._queue: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def append(self, args: tuple[Any, ...]) -> Any:
        """`asr_append_events(*args)`'s row (None: no such session), committed."""
        if not self._queue and self._may_send(1):
            self._inflight += 1
            self._items += 1
            try:
                return await self._single(args, fresh=True)
            finally:
                self._inflight -= 1
                self._items -= 1
                self._kick()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((args, future))
        self._kick()
        return await future

    def _may_send(self, waiting: int) -> bool:
        """Whether `waiting` appends may go out now: a call is free, and nothing is in flight
        or they are at least as many as the appends in flight. A second call of fewer would
        pay a whole call for a few appends, while the one in flight will soon be done and
        take them all; two calls of like size keep the database busy with one while this
        process readies the next."""
        return self._inflight < self.max_inflight and (
            self._inflight == 0 or waiting >= self._items
        )

    def _kick(self) -> None:
        while self._queue and self._may_send(len(self._queue)):
            batch = self._queue[: self.max_batch]
            del self._queue[: self.max_batch]
            self._inflight += 1
            self._items += len(batch)
            task = asyncio.get_running_loop().create_task(self._flush(batch))
            self._tasks.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self._tasks.discard)

    async def _flush(self, batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        try:
            if len(batch) == 1:
                await self._settle_alone(*batch[0], fresh=True)
                return
            try:
                rows = await self._batch([args for args, _ in batch])
            except Exception:
                # One item's failure must not be another's. The batch may have committed
                # and lost only its reply: these re-sent items are checked for their token.
                for args, future in batch:
                    await self._settle_alone(args, future, fresh=False)
                return
            for i, (_, future) in enumerate(batch, start=1):
                if not future.done():
                    future.set_result(rows.get(i))
        finally:
            self._inflight -= 1
            self._items -= len(batch)
            self._kick()

    async def _settle_alone(
        self, args: tuple[Any, ...], future: asyncio.Future[Any], *, fresh: bool
    ) -> None:
        try:
            row = await self._single(args, fresh=fresh)
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
        else:
            if not future.done():
                future.set_result(row)

    async def _single(self, args: tuple[Any, ...], *, fresh: bool) -> Any:
        """One append alone; `fresh`: its event ids were made for it and never sent, so it
        cannot have committed before and skips the write-token check."""
        sql = APPEND_FRESH if fresh else APPEND_EVENTS
        return await call(self.engine, sql, args, in_transaction=self.in_transaction)

    async def _batch(self, items: list[tuple[Any, ...]]) -> dict[int, Any]:
        """One `asr_append_batch` call; rows by item (1-based), absent for a missing session."""
        args = tuple(list(column) for column in zip(*items, strict=True))
        rows = await call(
            self.engine, APPEND_BATCH, args, in_transaction=self.in_transaction, all_rows=True
        )
        return {row["idx"]: row for row in rows}
