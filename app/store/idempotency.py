"""Idempotency keys: claim before the work, store the response after it.

The claim is its own transaction, so a concurrent duplicate sees the `in_flight` row and is
refused instead of running the work twice. A claim whose worker died is taken over once its
`locked_until` has passed; a finished one replays its stored response until `expires_at`.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, select, update

from app.runtime.errors import IdempotencyInFlight, IdempotencyKeyReused
from app.runtime.ports import IdempotencyClaim
from app.store.base import ALL_TENANTS, StoreBase, as_utc, utcnow
from app.store.tables import idempotency_keys

_IN_FLIGHT = "in_flight"
_DONE = "done"


class IdempotencyStore(StoreBase):
    idempotency_ttl = timedelta(hours=24)
    idempotency_lock = timedelta(seconds=60)

    async def claim_idempotency_key(
        self, tenant_id: str, key: str, *, request_hash: str
    ) -> IdempotencyClaim:
        """Claim `key` for this request, or return the response stored under it.

        Raises:
            IdempotencyKeyReused: the key was used with a different request.
            IdempotencyInFlight: the same request is still being processed.
        """
        now = utcnow()
        fresh = {
            "request_hash": request_hash,
            "state": _IN_FLIGHT,
            "status_code": None,
            "response": None,
            "headers": None,
            "created_at": now,
            "locked_until": now + self.idempotency_lock,
            "expires_at": now + self.idempotency_ttl,
        }
        t = idempotency_keys.c
        where = (t.tenant_id == tenant_id, t.key == key)
        async with self.write(tenant_id) as conn:
            inserted = (
                await conn.execute(
                    self.insert(idempotency_keys)
                    .values(tenant_id=tenant_id, key=key, **fresh)
                    .on_conflict_do_nothing(index_elements=["tenant_id", "key"])
                    .returning(t.key)
                )
            ).first()
            if inserted is not None:
                return IdempotencyClaim(claimed=True)
            query = select(idempotency_keys).where(*where)
            if self.is_postgres:
                query = query.with_for_update()
            row = (await conn.execute(query)).one()._mapping
            if as_utc(row["expires_at"]) <= now:
                await conn.execute(update(idempotency_keys).where(*where).values(**fresh))
                return IdempotencyClaim(claimed=True)
            if row["request_hash"] != request_hash:
                raise IdempotencyKeyReused()
            if row["state"] == _IN_FLIGHT:
                if as_utc(row["locked_until"]) > now:
                    raise IdempotencyInFlight()
                await conn.execute(update(idempotency_keys).where(*where).values(**fresh))
                return IdempotencyClaim(claimed=True)
            return IdempotencyClaim(
                claimed=False,
                status_code=row["status_code"],
                response=row["response"],
                headers=row["headers"] or {},
            )

    async def complete_idempotency_key(
        self,
        tenant_id: str,
        key: str,
        *,
        status_code: int,
        response: bytes,
        headers: dict[str, str],
    ) -> None:
        t = idempotency_keys.c
        async with self.write(tenant_id) as conn:
            await conn.execute(
                update(idempotency_keys)
                .where(t.tenant_id == tenant_id, t.key == key, t.state == _IN_FLIGHT)
                .values(state=_DONE, status_code=status_code, response=response, headers=headers)
            )

    async def release_idempotency_key(self, tenant_id: str, key: str) -> None:
        """Drop an unfinished claim so that the request may be sent again."""
        t = idempotency_keys.c
        async with self.write(tenant_id) as conn:
            await conn.execute(
                delete(idempotency_keys).where(
                    t.tenant_id == tenant_id, t.key == key, t.state == _IN_FLIGHT
                )
            )

    async def delete_expired_idempotency_keys(self) -> int:
        t = idempotency_keys.c
        async with self.write(ALL_TENANTS) as conn:
            result = await conn.execute(delete(idempotency_keys).where(t.expires_at <= utcnow()))
        return result.rowcount
