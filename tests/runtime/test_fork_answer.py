"""A fork answers with the child's row and folds nothing; its state is read when shown
(`as_loaded`), or kept by the fork itself when this process holds the source at the fork
point."""

from __future__ import annotations

import uuid

from app.assembly import runtime_over
from app.runtime.session.service import SessionRuntime
from app.store.stores import Stores
from tests.conftest import TenantKey


def message(i: int) -> dict[str, str]:
    return {"type": "message", "role": "user", "content": f"m{i}"}


async def source_of(runtime: SessionRuntime, tenant_id: str, n: int) -> str:
    sid = f"src-{uuid.uuid4().hex[:10]}"
    await runtime.create(tenant_id, session_id=sid, metadata={"k": "v"}, agent={}, binding={})
    for i in range(n):
        await runtime.append_items(tenant_id, sid, [message(i)])
    return sid


async def test_a_fork_answers_with_the_row_and_its_state_is_read_when_shown(
    store: Stores, tenant: TenantKey
) -> None:
    writer = runtime_over(store)
    sid = await source_of(writer, tenant.tenant_id, 6)
    runtime = runtime_over(store)  # a replica that never served the source
    expected = await runtime.state_at(tenant.tenant_id, sid, 4)
    runtime = runtime_over(store)
    child = await runtime.fork(tenant.tenant_id, sid, at_seq=4)
    assert child.parent_session_id == sid and child.forked_from_seq == 4
    assert child.last_seq == 5 and child.version == 1 and child.metadata == {"k": "v"}
    assert runtime.cached(tenant.tenant_id, child.session_id) is None  # nothing folded
    shown = await runtime.as_loaded(tenant.tenant_id, child)
    assert shown.session == child and shown.state.seq == 5
    assert shown.state.items == expected.items
    kept = runtime.cached(tenant.tenant_id, child.session_id)
    assert kept is not None and kept.state.items == expected.items


async def test_a_fork_at_the_cached_latest_seq_keeps_the_childs_state(
    store: Stores, tenant: TenantKey
) -> None:
    runtime = runtime_over(store)
    sid = await source_of(runtime, tenant.tenant_id, 3)
    await runtime.load(tenant.tenant_id, sid)
    child = await runtime.fork(tenant.tenant_id, sid)
    kept = runtime.cached(tenant.tenant_id, child.session_id)
    assert kept is not None and kept.session == child and kept.state.seq == child.last_seq
    # The same state a replica reads from the database (the copied snapshot and its tail).
    fresh = await runtime_over(store).as_loaded(tenant.tenant_id, child)
    assert fresh.state.to_json() == kept.state.to_json()
    again = await runtime.as_loaded(tenant.tenant_id, child)
    assert again.state.to_json() == kept.state.to_json()
