"""PostgreSQL's cross-tenant work: one SECURITY DEFINER function call per method.

The app role's row-level policies admit only the tenant its transaction names, and no value
names them all (migration 0009). What must span tenants is one narrow function each
(`sql/key_by_prefix.sql`, `sql/stale_runs.sql`, ...): owned by the tables' owner, run with
its rights and a pinned `search_path`, and let through by the owner's own policies only
while such a function runs. The app role may execute them, and do nothing else across
tenants: it is no member of the owner role, so it cannot `SET ROLE` to it.

Each call runs in a transaction that names no tenant; the rows come back in the columns of
their table (`_rows_of`), so they convert as every other read's do.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import Table, Text, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.selectable import TextualSelect

from app.runtime.ports import ApiKeyRecord, RunRecord, TenantRecord
from app.runtime.webhooks.records import Claim
from app.store.base import NO_TENANT
from app.store.cross_tenant import CrossTenantStore, key_from_row, tenant_from_row
from app.store.runs import run_from_row
from app.store.tables import api_keys, runs, tenants


def _rows_of(call: str, table: Table, suffix: str = "") -> TextualSelect:
    """`SELECT <table's columns> FROM <call>`, typed as the table's columns (JSON decoded).

    The columns are named, in the table model's order, so the order of the function's row
    type (the table's, as migrations built it) does not matter.
    """
    names = ", ".join(f'"{c.name}"' for c in table.c)
    return text(f"SELECT {names} FROM {call}{suffix}").columns(*table.c)


_KEY_BY_PREFIX = _rows_of("asr_key_by_prefix(p_prefix => :prefix)", api_keys)
_LIVE_KEY_PREFIXES = text(
    "SELECT prefix FROM asr_live_key_prefixes(p_prefixes => :prefixes) AS prefix"
).bindparams(bindparam("prefixes", type_=ARRAY(Text)))
_TENANT_BY_NAME = _rows_of("asr_tenant_by_name(p_name => :name)", tenants)
_TENANTS = _rows_of("asr_list_tenants()", tenants, " ORDER BY name")
_COUNT_TENANTS = text("SELECT asr_count_tenants()")
_STALE_RUNS = _rows_of("asr_stale_runs(p_limit => :limit)", runs)
_WEBHOOK_CLAIM = text(
    "SELECT tenant_id, webhook_id, session_id, seq, attempts FROM asr_webhook_claim("
    "p_owner => :owner, p_limit => :limit, p_lease_seconds => :lease)"
)
_DELETE_EXPIRED_KEYS = text("SELECT asr_delete_expired_idempotency_keys()")
_DUE_SCHEDULES = text("SELECT o_tenant, o_schedule FROM asr_due_schedules(p_limit => :limit)")


class PostgresCrossTenant(CrossTenantStore):
    """`CrossTenantStore` as calls of the SECURITY DEFINER functions."""

    async def get_api_key(self, prefix: str) -> ApiKeyRecord | None:
        async with self.db.read(NO_TENANT) as conn:
            row = (await conn.execute(_KEY_BY_PREFIX, {"prefix": prefix})).first()
        return key_from_row(row) if row is not None else None

    async def list_live_key_prefixes(self, prefixes: Collection[str]) -> set[str]:
        if not prefixes:
            return set()
        async with self.db.read(NO_TENANT) as conn:
            rows = await conn.execute(_LIVE_KEY_PREFIXES, {"prefixes": sorted(prefixes)})
            return {row[0] for row in rows.all()}

    async def get_tenant_by_name(self, name: str) -> TenantRecord | None:
        async with self.db.read(NO_TENANT) as conn:
            row = (await conn.execute(_TENANT_BY_NAME, {"name": name})).first()
        return tenant_from_row(row) if row is not None else None

    async def list_tenants(self) -> list[TenantRecord]:
        async with self.db.read(NO_TENANT) as conn:
            rows = (await conn.execute(_TENANTS)).all()
        return [tenant_from_row(r) for r in rows]

    async def count_tenants(self) -> int:
        async with self.db.read(NO_TENANT) as conn:
            return int((await conn.execute(_COUNT_TENANTS)).scalar_one())

    async def list_stale_runs(self, *, limit: int = 100) -> list[RunRecord]:
        """Expiry is judged by the database's clock (a caller's clock cannot widen the
        function's reach); the sweeper's fence re-checks each lease in its tenant's own
        transaction before anything is written."""
        async with self.db.read(NO_TENANT) as conn:
            rows = (await conn.execute(_STALE_RUNS, {"limit": limit})).all()
        return [run_from_row(r) for r in rows]

    async def claim_webhook_deliveries(
        self, *, owner: str, limit: int, lease_seconds: int
    ) -> list[Claim]:
        """`asr_webhook_claim`: FOR UPDATE SKIP LOCKED, so replicas claiming at once never
        wait on each other nor take the same row; leases by the database's clock."""
        params = {"owner": owner, "limit": limit, "lease": lease_seconds}
        async with self.db.write(NO_TENANT) as conn:
            rows = (await conn.execute(_WEBHOOK_CLAIM, params)).all()
        return [Claim(*row) for row in rows]

    async def delete_expired_idempotency_keys(self) -> int:
        """Expiry by the database's clock, as in `list_stale_runs`: the app role cannot
        make the function delete a key that is still live."""
        async with self.db.write(NO_TENANT) as conn:
            return int((await conn.execute(_DELETE_EXPIRED_KEYS)).scalar_one())

    async def list_due_schedules(self, *, limit: int = 100) -> list[tuple[str, str]]:
        """Due by the database's clock, as in `list_stale_runs`; the claim that follows is
        conditional on the row's version, in the tenant's own transaction."""
        async with self.db.read(NO_TENANT) as conn:
            rows = (await conn.execute(_DUE_SCHEDULES, {"limit": limit})).all()
        return [(r[0], r[1]) for r in rows]
