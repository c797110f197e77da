"""`AgentSessionStore`: the runtime's `SessionStore` on SQLite or PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.runtime.redaction import Redactor
from app.store.accounts import AccountStore
from app.store.idempotency import IdempotencyStore
from app.store.runs import RunStore


class AgentSessionStore(RunStore, AccountStore, IdempotencyStore):
    """Tenant-scoped persistence of sessions, events, snapshots, keys and idempotency rows."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_metadata_bytes: int = 16_384,
        idempotency_ttl_seconds: int = 86_400,
        idempotency_lock_seconds: int = 60,
        notify: bool = True,
        max_event_bytes: int = 1_048_576,
        redactor: Redactor | None = None,
    ) -> None:
        super().__init__(engine, notify=notify)
        self.max_metadata_bytes = max_metadata_bytes
        self.max_event_bytes = max_event_bytes
        self.redactor = redactor or Redactor()
        self.idempotency_ttl = timedelta(seconds=idempotency_ttl_seconds)
        self.idempotency_lock = timedelta(seconds=idempotency_lock_seconds)

    async def ping(self) -> None:
        """Round trip to the database (readiness)."""
        async with self.read() as conn:
            await conn.execute(text("SELECT 1"))
