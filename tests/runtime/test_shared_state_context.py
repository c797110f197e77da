"""The model sees the session's shared state: after the agent's instructions, compact, and
only once something set it."""

from __future__ import annotations

import uuid

from app.assembly import runtime_over
from app.runtime.models.base import ModelRequest, ModelResponse, OnDelta
from app.runtime.models.scripted import ScriptedModel
from app.runtime.runs.manager import RunManager
from app.runtime.runs.plan import RunRequest
from app.runtime.tools.registry import ToolRegistry
from app.store.stores import Stores
from tests.conftest import TenantKey


class Capturing(ScriptedModel):
    def __init__(self) -> None:
        self.instructions: list[str | None] = []

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        self.instructions.append(request.instructions)
        return await super().complete(request, on_delta)


async def test_the_prompt_holds_the_shared_state_once_set(store: Stores, tenant: TenantKey) -> None:
    runtime = runtime_over(store)
    model = Capturing()
    runs = RunManager(runtime, models={"scripted": model}, tools=ToolRegistry())
    sid = f"s-{uuid.uuid4().hex[:10]}"
    agent = {"instructions": "Be brief."}
    await runtime.create(tenant.tenant_id, session_id=sid, metadata={}, agent=agent, binding={})

    async def run() -> None:
        started = await runs.start(tenant.tenant_id, sid, RunRequest(input="hi"))
        await runs.wait(tenant.tenant_id, started.run_id, within_seconds=30)

    await run()
    await runtime.set_shared_state(tenant.tenant_id, sid, {"plan": ["a", "b"], "é": 1})
    await run()
    assert model.instructions[0] == "Be brief."
    second = model.instructions[1] or ""
    assert second.startswith("Be brief.\n\nShared state")
    assert second.endswith('{"plan":["a","b"],"é":1}')
