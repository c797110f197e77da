"""`SqliteIdempotency`: a key is sealed with an INSERT ... ON CONFLICT in the write's job."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.runtime.errors import IdempotentReplay
from app.runtime.ports import IdempotencyToken
from app.store.base import utcnow
from app.store.idempotency import IdempotencyStore
from app.store.tables import idempotency_keys


class SqliteIdempotency(IdempotencyStore):
    """Keys sealed by an INSERT ... ON CONFLICT in the guarded write's transaction."""

    async def seal(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        token: IdempotencyToken | None,
        result: dict[str, Any],
    ) -> None:
        """Record `token` with `result` in the open write transaction `conn`.

        Raises:
            IdempotentReplay: a live row holds the key (a duplicate committed first); the
                caller's transaction must roll back, which raising does.
        """
        if token is None:
            return
        now = utcnow()
        t = idempotency_keys.c
        fresh = {
            "request_hash": token.request_hash,
            "result": result,
            "status_code": None,
            "response": None,
            "headers": None,
            "created_at": now,
            "expires_at": now + self.idempotency_ttl,
        }
        stmt = (
            self.db.insert(idempotency_keys)
            .values(tenant_id=tenant_id, key=token.key, **fresh)
            .on_conflict_do_update(
                index_elements=["tenant_id", "key"], set_=fresh, where=t.expires_at <= now
            )
            .returning(t.key)
        )
        if (await conn.execute(stmt)).first() is None:
            raise IdempotentReplay(token.key)
