"""Tenants and keys: creation for the CLI, and authentication for every request."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from app.runtime.access.keys import generate_key, hash_secret, parse_key, secret_matches
from app.runtime.errors import KeyNotFound, TenantNotFound, Unauthorized
from app.runtime.ports import AccountPort, ApiKeyRecord, TenantRecord

# A dummy hash so that an unknown prefix costs the same compare as a wrong secret.
_DUMMY_HASH = hash_secret("not-a-key")
_AUTH_CACHE_SECONDS = 5.0
_AUTH_CACHE_MAX = 4096


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the tenant comes from the key, never from the request."""

    tenant_id: str
    key_prefix: str


class Accounts:
    def __init__(self, store: AccountPort) -> None:
        self._store = store
        # Short cache of successful lookups: a revoked key is refused within 5 s.
        self._cache: dict[str, tuple[float, Principal]] = {}

    async def create_tenant(self, name: str) -> TenantRecord:
        return await self._store.create_tenant(name)

    async def list_tenants(self) -> list[TenantRecord]:
        return await self._store.list_tenants()

    async def tenant_id_of(self, tenant_name: str) -> str:
        """The id of the named tenant (operators name tenants; the store keys by id)."""
        tenant = await self._store.get_tenant_by_name(tenant_name)
        if tenant is None:
            raise TenantNotFound(f"tenant {tenant_name!r} not found")
        return tenant.tenant_id

    async def create_key(
        self, tenant_name: str, *, name: str = "default"
    ) -> tuple[str, ApiKeyRecord]:
        """Create a key for the named tenant; returns (raw key, record). Raw is shown once."""
        tenant = await self._store.get_tenant_by_name(tenant_name)
        if tenant is None:
            raise TenantNotFound(f"tenant {tenant_name!r} not found")
        key = generate_key()
        record = await self._store.create_api_key(
            tenant.tenant_id, prefix=key.prefix, secret_hash=key.secret_hash, name=name
        )
        return key.raw, record

    async def list_keys(self, tenant_name: str) -> list[ApiKeyRecord]:
        tenant = await self._store.get_tenant_by_name(tenant_name)
        if tenant is None:
            raise TenantNotFound(f"tenant {tenant_name!r} not found")
        return await self._store.list_api_keys(tenant.tenant_id)

    async def revoke_key(self, key_or_prefix: str) -> None:
        parsed = parse_key(key_or_prefix)
        prefix = parsed[0] if parsed else key_or_prefix
        if not await self._store.revoke_api_key(prefix):
            raise KeyNotFound(f"no live key with prefix {prefix!r}")
        self._cache.clear()

    def forget_tenant(self, tenant_id: str) -> None:
        """Drop the cached keys of an erased tenant, so none is accepted a moment longer."""
        for key in [k for k, (_, p) in self._cache.items() if p.tenant_id == tenant_id]:
            del self._cache[key]

    async def rotate_key(self, tenant_name: str, old: str) -> tuple[str, ApiKeyRecord]:
        """A new key for the tenant, and the old one (key or prefix) revoked."""
        parsed = parse_key(old)
        prefix = parsed[0] if parsed else old
        record = await self._store.get_api_key(prefix)
        tenant = await self._store.get_tenant_by_name(tenant_name)
        if tenant is None or record is None or record.tenant_id != tenant.tenant_id:
            raise KeyNotFound(f"tenant {tenant_name!r} has no key with prefix {prefix!r}")
        raw, created = await self.create_key(tenant_name, name=record.name)
        await self.revoke_key(prefix)
        return raw, created

    async def bootstrap(self) -> str | None:
        """On an empty database, create tenant `default` and return a key for it."""
        if await self._store.count_tenants() > 0:
            return None
        await self._store.create_tenant("default")
        raw, _ = await self.create_key("default", name="bootstrap")
        return raw

    async def check_key(self, prefix: str, tenant_id: str) -> None:
        """Refuse a key that is revoked, gone (with its tenant) or another tenant's, reading
        the database now: unlike `authenticate`, never from the cache. For stream tokens,
        whose signature outlives the key that asked for them.

        Raises:
            Unauthorized: the key is not live for this tenant.
        """
        record = await self._store.get_api_key(prefix)
        if record is None or record.revoked_at is not None or record.tenant_id != tenant_id:
            raise Unauthorized()

    async def live_key_prefixes(self, prefixes: Collection[str]) -> set[str]:
        """Those of `prefixes` whose key is live now (not cached; one query)."""
        return await self._store.list_live_key_prefixes(prefixes)

    async def authenticate(self, raw: str | None) -> Principal:
        """Raises Unauthorized (one message) for a missing, malformed, unknown or revoked key."""
        if not raw:
            raise Unauthorized()
        now = time.monotonic()
        cache_key = hash_secret(raw)
        hit = self._cache.get(cache_key)
        if hit is not None and hit[0] > now:
            return hit[1]
        parsed = parse_key(raw)
        record = await self._store.get_api_key(parsed[0]) if parsed else None
        stored = record.secret_hash if record is not None else _DUMMY_HASH
        ok = secret_matches(parsed[1] if parsed else raw, stored)
        if record is None or not ok or record.revoked_at is not None:
            raise Unauthorized()
        principal = Principal(tenant_id=record.tenant_id, key_prefix=record.prefix)
        if len(self._cache) >= _AUTH_CACHE_MAX:
            self._cache.clear()
        self._cache[cache_key] = (now + _AUTH_CACHE_SECONDS, principal)
        return principal


def key_listing(record: ApiKeyRecord) -> dict[str, Any]:
    """A key as listings show it: prefix and name, never the hash."""
    return {
        "prefix": record.prefix,
        "name": record.name,
        "created_at": record.created_at.isoformat(),
        "revoked_at": record.revoked_at.isoformat() if record.revoked_at else None,
    }
