"""Open streams end when the key they were opened with stops being valid.

A request is authenticated once, when it arrives; a stream lives on for hours. Without a
re-check, a revoked key (or one deleted with its tenant) would keep receiving events for
as long as its streams stay open. So every replica keeps a `RevocationWatch`: each open
stream registers the prefix of its key, and every `interval` seconds one query asks which
of the watched prefixes are still live. A stream whose key is not is ended by the callback
it registered. The cost is bounded by the number of distinct keys with open streams on this
replica -- one query per interval, however many streams there are -- and each replica
watches its own streams, so revocation reaches every replica within one interval.

A failed check (the database is down) ends nothing: an outage is not a revocation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection
from typing import Protocol

log = logging.getLogger("app.runtime.access.revocation")


class LiveKeys(Protocol):
    async def live_key_prefixes(self, prefixes: Collection[str]) -> set[str]: ...


OnRevoked = Callable[[], None]


class RevocationWatch:
    """The keys of this replica's open streams, re-checked every `interval` seconds."""

    def __init__(self, accounts: LiveKeys, *, interval: float) -> None:
        self._accounts = accounts
        self.interval = interval
        self._watchers: dict[str, dict[int, OnRevoked]] = {}
        self._next_id = 0
        self._task: asyncio.Task[None] | None = None

    def watch(self, key_prefix: str, on_revoked: OnRevoked) -> Callable[[], None]:
        """Call `on_revoked` once if the key stops being live; returns the function that
        stops watching (call it when the stream ends, however it ends)."""
        self._next_id += 1
        handle = self._next_id
        self._watchers.setdefault(key_prefix, {})[handle] = on_revoked

        def unwatch() -> None:
            callbacks = self._watchers.get(key_prefix)
            if callbacks is not None:
                callbacks.pop(handle, None)
                if not callbacks:
                    del self._watchers[key_prefix]

        return unwatch

    @property
    def watched(self) -> int:
        """Streams being watched (for tests and debugging)."""
        return sum(len(callbacks) for callbacks in self._watchers.values())

    async def check(self) -> None:
        """One round: end the streams of every watched key that is no longer live."""
        if not self._watchers:
            return
        live = await self._accounts.live_key_prefixes(set(self._watchers))
        for prefix in [p for p in self._watchers if p not in live]:
            callbacks = self._watchers.pop(prefix, {})
            log.info("key %s is no longer valid: ending %d stream(s)", prefix, len(callbacks))
            for on_revoked in callbacks.values():
                try:
                    on_revoked()
                except Exception:  # one stream's failure must not spare the others
                    log.exception("ending a stream of a revoked key failed")

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="RevocationWatch._run")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check()
            except Exception as exc:
                log.warning("checking the keys of open streams failed: %s", type(exc).__name__)
