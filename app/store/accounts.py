"""Tenants and API keys. Keys are stored as prefix + SHA-256 of the secret, never raw."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any

from sqlalchemy import func, select, update

from app.runtime.errors import TenantAlreadyExists
from app.runtime.ports import ApiKeyRecord, TenantRecord
from app.store.base import ALL_TENANTS, StoreBase, as_utc, utcnow
from app.store.tables import api_keys, tenants


def _tenant(row: Any) -> TenantRecord:
    m = row._mapping
    return TenantRecord(
        tenant_id=m["tenant_id"], name=m["name"], created_at=as_utc(m["created_at"])
    )


def _key(row: Any) -> ApiKeyRecord:
    m = row._mapping
    revoked = m["revoked_at"]
    return ApiKeyRecord(
        key_id=m["key_id"],
        tenant_id=m["tenant_id"],
        prefix=m["prefix"],
        secret_hash=m["secret_hash"],
        name=m["name"],
        created_at=as_utc(m["created_at"]),
        revoked_at=as_utc(revoked) if revoked is not None else None,
    )


class AccountStore(StoreBase):
    """Tenants and their API keys (administrative; used by the CLI and auth)."""

    async def create_tenant(self, name: str) -> TenantRecord:
        """Raises TenantAlreadyExists when the name is taken."""
        stmt = (
            self.insert(tenants)
            .values(tenant_id=uuid.uuid4().hex, name=name, limits={}, created_at=utcnow())
            .on_conflict_do_nothing(index_elements=["name"])
            .returning(*tenants.c)
        )
        async with self.write(ALL_TENANTS) as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            raise TenantAlreadyExists(f"tenant {name!r} already exists")
        return _tenant(row)

    async def get_tenant_by_name(self, name: str) -> TenantRecord | None:
        async with self.read(ALL_TENANTS) as conn:
            row = (await conn.execute(select(tenants).where(tenants.c.name == name))).first()
        return _tenant(row) if row is not None else None

    async def list_tenants(self) -> list[TenantRecord]:
        """Every tenant, by name (operators' listing)."""
        async with self.read(ALL_TENANTS) as conn:
            rows = (await conn.execute(select(tenants).order_by(tenants.c.name))).all()
        return [_tenant(r) for r in rows]

    async def count_tenants(self) -> int:
        async with self.read(ALL_TENANTS) as conn:
            return int((await conn.execute(select(func.count()).select_from(tenants))).scalar_one())

    async def create_api_key(
        self, tenant_id: str, *, prefix: str, secret_hash: str, name: str
    ) -> ApiKeyRecord:
        stmt = (
            api_keys.insert()
            .values(
                key_id=uuid.uuid4().hex,
                tenant_id=tenant_id,
                prefix=prefix,
                secret_hash=secret_hash,
                name=name,
                created_at=utcnow(),
                revoked_at=None,
            )
            .returning(*api_keys.c)
        )
        async with self.write(tenant_id) as conn:
            return _key((await conn.execute(stmt)).one())

    async def get_api_key(self, prefix: str) -> ApiKeyRecord | None:
        """The key with this public prefix, revoked or not."""
        async with self.read(ALL_TENANTS) as conn:
            row = (await conn.execute(select(api_keys).where(api_keys.c.prefix == prefix))).first()
        return _key(row) if row is not None else None

    async def list_live_key_prefixes(self, prefixes: Collection[str]) -> set[str]:
        """Those of `prefixes` whose key exists and is not revoked (one query for all of them:
        open streams re-check their keys with it, every few seconds)."""
        if not prefixes:
            return set()
        query = select(api_keys.c.prefix).where(
            api_keys.c.prefix.in_(sorted(prefixes)), api_keys.c.revoked_at.is_(None)
        )
        async with self.read(ALL_TENANTS) as conn:
            return {row[0] for row in (await conn.execute(query)).all()}

    async def list_api_keys(self, tenant_id: str) -> list[ApiKeyRecord]:
        async with self.read(tenant_id) as conn:
            rows = (
                await conn.execute(
                    select(api_keys)
                    .where(api_keys.c.tenant_id == tenant_id)
                    .order_by(api_keys.c.created_at)
                )
            ).all()
        return [_key(r) for r in rows]

    async def revoke_api_key(self, prefix: str) -> bool:
        """Mark the key revoked; False when no live key has this prefix."""
        async with self.write(ALL_TENANTS) as conn:
            result = await conn.execute(
                update(api_keys)
                .where(api_keys.c.prefix == prefix, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
        return result.rowcount > 0
