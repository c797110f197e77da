"""Idempotency keys: recorded in the transaction of the work they guard.

A key row is inserted by the guarded write itself (`seal`), at the end of its transaction,
with `result`: what the write committed. So after any fault (a crash, a lost commit reply, a
failed write of the response) either the work and its key are both committed, and a retry
finds the key and replays, or neither is, and a retry does the work. There is no claim that
could outlive its worker. A duplicate racing a first attempt queues on the key's unique
index (PostgreSQL) or behind the single writer (SQLite); when the first commits, the
duplicate's insert finds the key, raises `IdempotentReplay`, and its transaction rolls back.

The rendered response is stored beside the key afterwards (`store_idempotent_response`), so
later replays return it byte for byte; until then a replay renders it again from `result`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.ports import AppendResult, IdempotencyRecord, IdempotencyToken
from app.store.base import Database, utcnow
from app.store.tables import idempotency_keys


def committed_result(result: AppendResult, run_id: str | None = None) -> dict[str, Any]:
    """What a guarded write committed, as its key row keeps it (the stored functions build
    the same object in SQL)."""
    session = result.session
    n = len(result.events)
    out: dict[str, Any] = {
        "session_id": session.session_id,
        "first_seq": session.last_seq - n + 1,
        "last_seq": session.last_seq,
        "version": session.version,
    }
    if run_id is not None:
        out["run_id"] = run_id
    return out


class IdempotencyStore(ABC):
    """The Idempotency-Key rows: sealed in the guarded write's own transaction (each
    backend's `seal`, which the other stores call), read back, answered."""

    def __init__(self, db: Database, *, ttl_seconds: int = 86_400) -> None:
        self.db = db
        self.idempotency_ttl = timedelta(seconds=ttl_seconds)

    def idempotency_args(self, token: IdempotencyToken | None) -> tuple[Any, Any, Any]:
        """(key, request hash, expiry) as the stored functions take them."""
        if token is None:
            return None, None, None
        return token.key, token.request_hash, utcnow() + self.idempotency_ttl

    @abstractmethod
    async def seal(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        token: IdempotencyToken | None,
        result: dict[str, Any],
    ) -> None:
        """Record `token` with `result` in the open write transaction `conn` (each backend
        has its one way of doing it).

        Raises:
            IdempotentReplay: a live row holds the key (a duplicate committed first); the
                caller's transaction must roll back, which raising does.
        """

    async def get_idempotency_key(self, tenant_id: str, key: str) -> IdempotencyRecord | None:
        """The live record of `key` (None: never used, or expired)."""
        t = idempotency_keys.c
        async with self.db.read(tenant_id) as conn:
            row = (
                await conn.execute(
                    select(idempotency_keys).where(
                        t.tenant_id == tenant_id, t.key == key, t.expires_at > utcnow()
                    )
                )
            ).first()
        if row is None:
            return None
        m = row._mapping
        return IdempotencyRecord(
            request_hash=m["request_hash"],
            result=m["result"] or {},
            status_code=m["status_code"],
            response=m["response"],
            headers=m["headers"],
        )

    async def store_idempotent_response(
        self,
        tenant_id: str,
        token: IdempotencyToken,
        *,
        status_code: int,
        response: bytes,
        headers: dict[str, str],
    ) -> None:
        """Keep the first rendered answer of a key; later replays send it as is.

        The key row is normally there already (sealed with the work). Work outside the ledger
        (writing to a process's stdin) seals nothing: its key is recorded here, after the
        work, so it is replayed once answered but not protected against a crash before.
        """
        now = utcnow()
        t = idempotency_keys.c
        answer = {"status_code": status_code, "response": response, "headers": headers}
        stmt = (
            self.db.insert(idempotency_keys)
            .values(
                tenant_id=tenant_id,
                key=token.key,
                request_hash=token.request_hash,
                result={},
                created_at=now,
                expires_at=now + self.idempotency_ttl,
                **answer,
            )
            .on_conflict_do_update(
                index_elements=["tenant_id", "key"],
                set_=answer,
                where=(t.response.is_(None) & (t.request_hash == token.request_hash)),
            )
        )
        async with self.db.write(tenant_id) as conn:
            await conn.execute(stmt)
