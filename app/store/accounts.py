"""Tenants and API keys. Keys are stored as prefix + SHA-256 of the secret, never raw.

Lookups that span tenants (a key by its prefix, a tenant by its name, the listing) are
`CrossTenantStore`'s; everything written here runs in the one tenant's transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection

from sqlalchemy import select, update

from app.runtime.errors import TenantAlreadyExists
from app.runtime.ports import ApiKeyRecord, TenantRecord
from app.store.base import Database, utcnow
from app.store.cross_tenant import CrossTenantStore, key_from_row, tenant_from_row
from app.store.tables import api_keys, tenants


class AccountStore:
    """Tenants and their API keys (administrative; used by the CLI and auth)."""

    def __init__(self, db: Database, cross: CrossTenantStore) -> None:
        self.db = db
        self._cross = cross

    # The lookups that span tenants: the backend's `CrossTenantStore` does them.

    async def get_api_key(self, prefix: str) -> ApiKeyRecord | None:
        """The key with this public prefix, revoked or not, whichever its tenant."""
        return await self._cross.get_api_key(prefix)

    async def list_live_key_prefixes(self, prefixes: Collection[str]) -> set[str]:
        """Those of `prefixes` whose key exists and is not revoked."""
        return await self._cross.list_live_key_prefixes(prefixes)

    async def get_tenant_by_name(self, name: str) -> TenantRecord | None:
        """The tenant with this name."""
        return await self._cross.get_tenant_by_name(name)

    async def list_tenants(self) -> list[TenantRecord]:
        """Every tenant, by name."""
        return await self._cross.list_tenants()

    async def count_tenants(self) -> int:
        """How many tenants there are."""
        return await self._cross.count_tenants()

    async def create_tenant(self, name: str) -> TenantRecord:
        """Raises TenantAlreadyExists when the name is taken.

        The transaction is the new tenant's own: a name taken by another tenant is found by
        the unique index, which sees every row whatever the row-level policies admit.
        """
        tenant_id = uuid.uuid4().hex
        stmt = (
            self.db.insert(tenants)
            .values(tenant_id=tenant_id, name=name, limits={}, created_at=utcnow())
            .on_conflict_do_nothing(index_elements=["name"])
            .returning(*tenants.c)
        )
        async with self.db.write(tenant_id) as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            raise TenantAlreadyExists(f"tenant {name!r} already exists")
        return tenant_from_row(row)

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
        async with self.db.write(tenant_id) as conn:
            return key_from_row((await conn.execute(stmt)).one())

    async def list_api_keys(self, tenant_id: str) -> list[ApiKeyRecord]:
        async with self.db.read(tenant_id) as conn:
            rows = (
                await conn.execute(
                    select(api_keys)
                    .where(api_keys.c.tenant_id == tenant_id)
                    .order_by(api_keys.c.created_at)
                )
            ).all()
        return [key_from_row(r) for r in rows]

    async def revoke_api_key(self, prefix: str) -> bool:
        """Mark the key revoked; False when no live key has this prefix.

        Only the lookup spans tenants (`get_api_key`); the revocation is written in the
        key's own tenant's transaction. A key never changes tenant, so the two cannot
        disagree, and a revocation racing this one leaves `revoked_at IS NULL` false here.
        """
        key = await self.get_api_key(prefix)
        if key is None or key.revoked_at is not None:
            return False
        async with self.db.write(key.tenant_id) as conn:
            result = await conn.execute(
                update(api_keys)
                .where(
                    api_keys.c.tenant_id == key.tenant_id,
                    api_keys.c.prefix == prefix,
                    api_keys.c.revoked_at.is_(None),
                )
                .values(revoked_at=utcnow())
            )
        return result.rowcount > 0
