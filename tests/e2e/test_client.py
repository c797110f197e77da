"""The Python clients against a real server: typed results, typed errors, streams."""

from __future__ import annotations

import asyncio

import pytest

from app.client import (
    AsyncSessionClient,
    ConflictError,
    NotFoundError,
    PreconditionFailedError,
    SessionClient,
    ValidationError,
)
from tests.conftest import Server, TenantKey

USER = {"type": "message", "role": "user", "content": "hi"}


async def test_async_client_covers_the_lifecycle(server: Server, tenant: TenantKey) -> None:
    async with AsyncSessionClient(server.base_url, api_key=tenant.key) as asr:
        session = await asr.create_session(metadata={"user": "alice"}, idempotency_key="c-1")
        again = await asr.create_session(metadata={"user": "alice"}, idempotency_key="c-1")
        assert again.session_id == session.session_id
        sid = session.session_id
        appended = await asr.append_items(sid, [USER])
        assert appended.last_seq == 2
        with pytest.raises(ConflictError) as conflict:
            await asr.append_items(sid, [USER], expected_seq=1)
        assert conflict.value.code == "seq_conflict" and conflict.value.problem["current_seq"] == 2
        with pytest.raises(PreconditionFailedError):
            await asr.save(sid, if_match=1)
        saved = await asr.save(sid, if_match=(await asr.get_state(sid)).version)
        assert saved.snapshot_seq == 3
        result = await asr.run(sid, "hello")
        assert result.stop_reason == "COMPLETED" and result.output == "echo: hello"
        frames = [f async for f in asr.stream_run(sid, "[words:3]")]
        assert [f.event for f in frames].count("delta") == 3
        child = await asr.fork(sid, at_seq=2)
        assert child.parent_session_id == sid and child.counts.items == 1
        assert (await asr.projection(sid)).equals_live
        exported = [e async for e in asr.export_events(sid)]
        assert [e["seq"] for e in exported] == list(range(1, len(exported) + 1))
        listed = await asr.list_sessions(metadata={"user": "alice"})
        assert {s.session_id for s in listed.data} == {sid, child.session_id}
        with pytest.raises(ValidationError):
            await asr.create_session(tenant_id="x")
        await asr.delete_session(child.session_id)
        with pytest.raises(NotFoundError) as missing:
            await asr.get_session(child.session_id)
        assert missing.value.code == "session_not_found"


async def test_sync_client(server: Server, tenant: TenantKey) -> None:
    def work() -> tuple[str, str]:
        with SessionClient(server.base_url, api_key=tenant.key) as asr:
            sid = asr.create_session().session_id
            run = asr.run(sid, "[ask]")
            return run.stop_reason, asr.memory(sid).items[-1]["content"]

    stop, last = await asyncio.to_thread(work)
    assert stop == "NEEDS_USER_INPUT" and last.endswith("?")
