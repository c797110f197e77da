"""A run's deltas as they leave it: coalesced per writer tick, redacted on the tick's text,
complete before the turn's events are written."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from app.assembly import runtime_over
from app.runtime.models.base import ModelRequest, ModelResponse, OnDelta
from app.runtime.runs.manager import RunManager
from app.runtime.runs.plan import RunRequest
from app.runtime.tools.registry import ToolRegistry
from app.store.stores import Stores
from tests.conftest import TenantKey

SECRET = "sk-abcdefghijklmnop1234"


class Leaky:
    """Streams a key of its own, split across chunks no pattern matches alone."""

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        chunks = ["Your key: ", SECRET[:9], SECRET[9:], " — keep it safe."]
        on_delta({"type": "delta", "text": chunks[0]})
        await asyncio.sleep(0)  # the first chunk goes now: the rest must wait for the tick
        for chunk in chunks[1:]:
            on_delta({"type": "delta", "text": chunk})
        await asyncio.sleep(0)
        return ModelResponse(text="".join(chunks))


class Recorder:
    """The live path's port, keeping what the run published and when the turn ended."""

    def __init__(self) -> None:
        self.log: list[Any] = []

    def publish_ephemeral(
        self,
        tenant_id: str,
        session_id: str,
        frame: dict[str, Any],
        *,
        after_seq: int | None = None,
    ) -> None:
        self.log.append(frame)

    async def end_turn(
        self, tenant_id: str, session_id: str, *, run_id: str | None, turn_id: str | None
    ) -> None:
        self.log.append(("end", turn_id))


async def test_a_ticks_text_is_redacted_whole_and_sent_before_the_turn_ends(
    store: Stores, tenant: TenantKey
) -> None:
    live = Recorder()
    runtime = runtime_over(store, live=live)
    runs = RunManager(
        runtime, models={"scripted": Leaky()}, tools=ToolRegistry(), delta_tick_seconds=60
    )
    sid = f"s-{uuid.uuid4().hex[:10]}"
    await runtime.create(tenant.tenant_id, session_id=sid, metadata={}, agent={}, binding={})
    started = await runs.start(tenant.tenant_id, sid, RunRequest(input="hi"))
    await runs.wait(tenant.tenant_id, started.run_id, within_seconds=30)
    frames = [entry for entry in live.log if isinstance(entry, dict)]
    # The first chunk once the model yielded, the rest in one frame at the end of the turn
    # (the tick is a minute): the key was whole in that frame, so it was redacted.
    assert [f["text"] for f in frames] == ["Your key: ", "[REDACTED] — keep it safe."]
    assert live.log[-1] == ("end", f"{started.run_id}.t1")
    assert all(f["run_id"] == started.run_id for f in frames)
