"""What a live stream holds: its bounded inbox and the items that go into it."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.runtime.session.events import Event


@dataclass(slots=True)
class Delivery:
    """A committed event on its way to live subscribers.

    `frame` is encoded by the first stream that sends it and shared by the rest, so fan-out
    to N subscribers serialises each event once, not N times.
    """

    event: Event
    frame: bytes | None = None


@dataclass(slots=True)
class Ephemeral:
    """A delta frame: no seq, never stored, only for subscribers that asked for deltas.

    `encoded` is its SSE frame, made by the first stream that sends it and shared by the
    rest, as `Delivery.frame` is.
    """

    frame: dict[str, Any]
    encoded: bytes | None = field(default=None, compare=False)


Item = Delivery | Ephemeral


class Subscription:
    """One live stream's inbox. Bounded: a consumer too slow to keep up is marked
    `overflowed` (and its queue dropped) instead of growing the server's memory.

    A push is refused only when `limit` items are already waiting, so one read batch never
    overflows a consumer that keeps up; the inbox holds at most limit + one batch.
    """

    def __init__(
        self,
        *,
        limit: int,
        deltas: bool = False,
        on_overflow: Callable[[], None] | None = None,
    ) -> None:
        self.deltas = deltas
        self.overflowed = False
        self.closed: str | None = None
        # Done once the other replicas have been told of this subscription (several
        # replicas: a write elsewhere is announced here only after that); None: no need.
        self.ready: asyncio.Future[None] | None = None
        self._limit = limit
        self._on_overflow = on_overflow
        self._items: deque[Item] = deque()
        self._wake = asyncio.Event()

    def push(self, items: Sequence[Item]) -> None:
        if self.overflowed or self.closed is not None:
            return
        if len(self._items) >= self._limit:
            self.overflowed = True
            self._items.clear()
            if self._on_overflow is not None:
                self._on_overflow()
        else:
            self._items.extend(items)
        self._wake.set()

    def poke(self) -> None:
        """Wake the consumer without data: "read the table again"."""
        self._wake.set()

    def close(self, reason: str) -> None:
        if self.closed is None:
            self.closed = reason
        self._wake.set()

    async def announced(self, within: float = 2.0) -> None:
        """Wait (at most `within` seconds: a stalled database must not hold the stream)
        until the other replicas have been told of this subscription."""
        if self.ready is None or self.ready.done():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await asyncio.shield(self.ready)

    def take_ephemeral(self) -> list[Ephemeral]:
        """The delta frames waiting, leaving committed events in place: a replay reads those
        from the table, but deltas exist nowhere else (a run that ends during the replay
        must not take its text with it)."""
        if not any(isinstance(item, Ephemeral) for item in self._items):
            return []
        frames = [item for item in self._items if isinstance(item, Ephemeral)]
        self._items = deque(item for item in self._items if not isinstance(item, Ephemeral))
        return frames

    def reset(self) -> None:
        """Forget an overflow. Sound only before re-reading the table, which then holds
        everything that was dropped."""
        self._items.clear()
        self.overflowed = False

    async def take(self, max_wait: float | None = None) -> list[Item]:
        """Wait for items, a poke, an overflow or a close (or `max_wait` seconds); return the
        items."""
        if not self._wake.is_set():
            if max_wait is None:  # the common case: no timer to arm per wait
                await self._wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max_wait):
                        await self._wake.wait()
        self._wake.clear()
        items = list(self._items)
        self._items.clear()
        return items
