"""Erasure reaches every replica: each replica's `Eraser` hears the control message (here
two replicas in one process, sharing one control fan-out; between processes it is the
PostgreSQL channel run cancels use) and drops its cached state and keys of what went."""

from __future__ import annotations

from pathlib import Path

from app.assembly import runtime_over
from app.runtime.access.accounts import Accounts
from app.runtime.ports import LocalControl
from app.runtime.session.erasure import Eraser, Workspaces
from app.store.stores import Stores
from tests.conftest import make_tenant


async def test_a_session_and_a_tenant_erased_on_one_replica_leave_no_cache_on_another(
    store: Stores, tmp_path: Path
) -> None:
    control = LocalControl()
    replicas = []
    for _ in range(2):
        runtime = runtime_over(store)
        accounts = Accounts(store.accounts)
        eraser = Eraser(
            store.erasure,
            runtime,
            workspaces=Workspaces(tmp_path),
            processes=None,
            control=control,
            forget_tenant=accounts.forget_tenant,
        )
        replicas.append((runtime, accounts, eraser))
    (here, _, eraser), (there, there_accounts, _) = replicas
    tenant = await make_tenant(store)
    kept = await make_tenant(store)
    ids = []
    for owner in (tenant, tenant, kept):
        created = await here.create(
            owner.tenant_id, session_id=None, metadata={}, agent={}, binding={}
        )
        ids.append((owner.tenant_id, created.session.session_id))
    for key in ids:
        await there.load(*key)
        assert key in there._cache
    await there_accounts.authenticate(tenant.key)
    (tenant_workspace := tmp_path / tenant.tenant_id).mkdir()
    (tenant_workspace / "f.txt").write_text("x")

    await eraser.erase_session(*ids[0], requested_by="test")
    assert ids[0] not in there._cache and ids[1] in there._cache

    await eraser.erase_tenant(tenant.tenant_id, requested_by="test")
    assert ids[1] not in there._cache and ids[2] in there._cache
    assert not any(p.tenant_id == tenant.tenant_id for _, p in there_accounts._cache.values())
    assert not tenant_workspace.exists()
