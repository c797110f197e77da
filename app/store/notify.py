"""Wake-ups for live readers: what a write transaction announces, and how.

A transaction that inserts events records the sessions it touched on its connection. Just
before it commits, it sends ONE `pg_notify` per touched session (in practice, one per
transaction) on PostgreSQL: PostgreSQL delivers it only if the transaction commits, so a
rolled-back append wakes nobody. After the commit, in-process listeners (this replica's bus)
are called directly, which is all SQLite has.

The payload is `<tenant_id>:<session_id>:<last_seq>`: a wake-up, never the event. Readers
fetch the rows from the table. A payload that would exceed `MAX_PAYLOAD_BYTES` (only with
very long ids) is sent as `<tenant_id>:` — "something changed in this tenant" — so nothing is
ever truncated into a wrong session id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger("app.store.notify")

CHANNEL = "asr_events"
MAX_PAYLOAD_BYTES = 200  # PostgreSQL allows 8000; a wake-up needs far less
_TOUCHED = "asr_touched_sessions"
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


@dataclass(frozen=True, slots=True)
class Wakeup:
    """Session `session_id` of `tenant_id` has events up to `last_seq` (None: unknown).

    `session_id` None means any session of the tenant may have changed.
    """

    tenant_id: str
    session_id: str | None = None
    last_seq: int | None = None


def encode_wakeup(wakeup: Wakeup) -> str:
    payload = f"{wakeup.tenant_id}:{wakeup.session_id}:{wakeup.last_seq}"
    if wakeup.session_id is None or len(payload.encode()) > MAX_PAYLOAD_BYTES:
        return f"{wakeup.tenant_id}:"
    return payload


def decode_wakeup(payload: str) -> Wakeup | None:
    """The wake-up in a payload, or None for a payload that is not ours."""
    tenant_id, sep, rest = payload.partition(":")
    if not tenant_id or not sep:
        return None
    if not rest:
        return Wakeup(tenant_id)
    session_id, sep, seq = rest.rpartition(":")
    if not session_id or not sep or not seq.isdigit():
        return None
    return Wakeup(tenant_id, session_id, int(seq))


class Announcer:
    """Collects the sessions a write transaction appended to, and announces them."""

    def __init__(self, *, notify: bool) -> None:
        self.notify = notify
        self.listeners: list[Callable[[Wakeup], None]] = []

    def begin(self, conn: AsyncConnection) -> None:
        conn.info[_TOUCHED] = {}

    def touch(self, conn: AsyncConnection, tenant_id: str, session_id: str, last_seq: int) -> None:
        """Record that this transaction wrote events of the session up to `last_seq`."""
        touched: dict[tuple[str, str], int] = conn.info.setdefault(_TOUCHED, {})
        key = (tenant_id, session_id)
        touched[key] = max(last_seq, touched.get(key, 0))

    async def before_commit(self, conn: AsyncConnection) -> list[Wakeup]:
        """NOTIFY inside the transaction (delivered on commit only); returns the wake-ups."""
        touched: dict[tuple[str, str], int] = conn.info.pop(_TOUCHED, None) or {}
        wakeups = [Wakeup(t, s, seq) for (t, s), seq in touched.items()]
        if self.notify:
            for wakeup in wakeups:
                await conn.execute(_NOTIFY, {"channel": CHANNEL, "payload": encode_wakeup(wakeup)})
        return wakeups

    def discard(self, conn: AsyncConnection) -> None:
        """Forget what a rolled-back transaction touched (conn.info outlives it)."""
        conn.info.pop(_TOUCHED, None)

    def after_commit(self, wakeups: list[Wakeup]) -> None:
        for wakeup in wakeups:
            for listener in list(self.listeners):
                try:
                    listener(wakeup)
                except Exception:  # a listener must never fail a committed write
                    log.exception("wake-up listener failed")
