"""The Python client (`asr_client`, clients/python) against real servers: every route, typed
results, typed errors, streams that resume on their own, and the README's example as written.

Two `asr serve` replicas share the run's database: `a` with the process plane and an agents
file, `b` with processes off (its process routes answer 404 `processes_disabled`). The resume
tests put a loopback TCP proxy in front of them and cut it mid-stream, so the client really
loses its connection and comes back, possibly on the other replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from asr_client import (
    AsyncSessionClient,
    AuthenticationError,
    ConflictError,
    Frame,
    NotFoundError,
    PreconditionFailedError,
    SessionClient,
    ValidationError,
)
from asr_client.models import (
    AgentList,
    AppendRead,
    CompactRead,
    ContextRead,
    ContinueRead,
    DelegateRead,
    EventList,
    EventTypeList,
    MemoryView,
    ModelProfileList,
    ProcessList,
    ProcessLogs,
    ProcessRead,
    ProjectionRead,
    RunList,
    RunRead,
    SaveRead,
    ScheduleFireList,
    ScheduleFireRead,
    ScheduleList,
    ScheduleRead,
    SessionList,
    SessionRead,
    StateRead,
    StdinRead,
    StreamTokenRead,
    ToolList,
    UsageRead,
    WebhookCreated,
)

from app.runtime.session.events import EventType
from app.store.stores import Stores
from tests.conftest import ROOT, Server, TenantKey, make_tenant, start_server, stop_server
from tests.sse.conftest import SSE_ENV

USER = {"type": "message", "role": "user", "content": "hi"}
S = "/v1/sessions/{session_id}"
P = S + "/processes/{process_id}"

# Every operation of the API under /v1/ and the client methods that call it. A route added
# without a client method fails `test_every_route_has_a_client_method`.
SCH = "/v1/schedules/{schedule_id}"
ROUTES: dict[tuple[str, str], tuple[str, ...]] = {
    ("POST", "/v1/sessions"): ("create_session",),
    ("GET", "/v1/sessions"): ("list_sessions",),
    ("GET", S): ("get_session",),
    ("PATCH", S): ("update_session",),
    ("DELETE", S): ("delete_session",),
    ("POST", S + "/items"): ("append_items",),
    ("GET", S + "/events"): ("list_events", "export_events"),
    ("GET", "/v1/export/sessions"): ("export_sessions",),
    ("GET", S + "/state"): ("get_state",),
    ("GET", S + "/shared-state"): ("get_shared_state",),
    ("PATCH", S + "/shared-state"): ("patch_shared_state",),
    ("PUT", S + "/shared-state"): ("put_shared_state",),
    ("POST", S + "/save"): ("save",),
    ("POST", S + "/resume"): ("resume",),
    ("POST", S + "/fork"): ("fork",),
    ("POST", S + "/restore"): ("restore",),
    ("GET", S + "/projection"): ("projection",),
    ("GET", S + "/memory"): ("memory",),
    ("POST", S + "/compact"): ("compact",),
    ("GET", S + "/context"): ("context",),
    ("POST", S + "/runs"): ("run", "stream_run"),
    ("GET", S + "/runs"): ("list_runs",),
    ("GET", S + "/runs/{run_id}"): ("get_run",),
    ("POST", S + "/runs/{run_id}/cancel"): ("cancel_run",),
    ("POST", S + "/tool-outputs"): ("submit_tool_outputs",),
    ("POST", S + "/approvals"): ("decide_approval",),
    ("GET", S + "/usage"): ("usage",),
    ("POST", "/v1/runs"): ("run_once",),
    ("POST", S + "/delegate"): ("delegate",),
    ("GET", S + "/processes"): ("list_processes",),
    ("POST", S + "/processes"): ("start_process",),
    ("GET", P): ("get_process",),
    ("GET", P + "/logs"): ("process_logs",),
    ("POST", P + "/stdin"): ("write_stdin",),
    ("POST", P + "/stop"): ("stop_process",),
    ("GET", "/v1/tools"): ("list_tools",),
    ("GET", "/v1/agents"): ("list_agents",),
    ("GET", "/v1/models"): ("list_models",),
    ("GET", "/v1/event-types"): ("list_event_types",),
    ("GET", S + "/events/stream"): ("stream_events",),
    ("GET", "/v1/events/stream"): ("stream_tenant_events",),
    ("POST", "/v1/stream-tokens"): ("create_stream_token",),
    ("POST", "/v1/schedules"): ("create_schedule",),
    ("GET", "/v1/schedules"): ("list_schedules",),
    ("GET", SCH): ("get_schedule",),
    ("PATCH", SCH): ("update_schedule",),
    ("DELETE", SCH): ("delete_schedule",),
    ("POST", SCH + "/pause"): ("pause_schedule",),
    ("POST", SCH + "/resume"): ("resume_schedule",),
    ("POST", SCH + "/trigger"): ("trigger_schedule",),
    ("GET", SCH + "/runs"): ("list_schedule_runs",),
}
W = "/v1/webhooks/{webhook_id}"
ROUTES.update(
    {
        ("POST", "/v1/webhooks"): ("create_webhook",),
        ("GET", "/v1/webhooks"): ("list_webhooks",),
        ("GET", W): ("get_webhook",),
        ("PATCH", W): ("update_webhook",),
        ("DELETE", W): ("delete_webhook",),
        ("GET", W + "/deliveries"): ("list_webhook_deliveries",),
        ("GET", W + "/deliveries/{delivery_id}"): ("get_webhook_delivery",),
        ("POST", W + "/deliveries/{delivery_id}/redeliver"): ("redeliver_webhook",),
    }
)
METHODS = {name for names in ROUTES.values() for name in names}
NOT_ROUTES = {"aclose", "close"}  # public client methods that send no request
# Routes for other protocols' own clients (AG-UI's HttpAgent), not this client's.
# Connect and stop are the AG-UI family's too (the TypeScript client's AsrAgentRunner uses them).
FOREIGN_ROUTES = {
    ("POST", "/v1/ag-ui"),
    ("POST", "/v1/ag-ui/{agent_name}"),
    ("POST", "/v1/ag-ui/connect"),
    ("POST", "/v1/ag-ui/stop"),
}
# Operator routes (the admin token, not a tenant's key): the `asr` CLI is their client.
OPERATOR_ROUTES = {
    ("DELETE", "/v1/admin/tenants/{tenant_id}"),
    ("GET", "/v1/admin/tenants/{tenant_id}/erasures"),
    ("GET", "/v1/admin/tenants/{tenant_id}/retention"),
    ("PUT", "/v1/admin/tenants/{tenant_id}/retention"),
    ("POST", "/v1/admin/tenants/{tenant_id}/retention/run"),
}

AGENTS_YAML = """\
agents:
  helper:
    description: Says hello.
    provider: scripted
    instructions: Be brief.
    tools: [echo]
"""


@dataclass
class Replicas:
    a: Server  # processes on, agents file
    b: Server  # processes off


@pytest.fixture(scope="module")
def replicas(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    root = tmp_path_factory.mktemp("client")
    (root / "agents.yaml").write_text(AGENTS_YAML)
    features = {
        "ASR_PROCESSES_ENABLED": "true",
        "ASR_WORKSPACE_ROOT": str(root / "workspaces"),
        "ASR_AGENTS_FILE": str(root / "agents.yaml"),
        # The webhook below targets a loopback port nothing listens on (never a real host).
        "ASR_WEBHOOK_ALLOW_NETWORKS": "127.0.0.1/32",
    }
    started: dict[str, Server] = {}

    def start(name: str, env: dict[str, str]) -> None:
        started[name] = start_server(
            database_url, root / f"{name}.log", ready_seconds=120, **SSE_ENV, **env
        )

    threads = [
        threading.Thread(target=start, args=("a", features)),
        threading.Thread(target=start, args=("b", {})),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert set(started) == {"a", "b"}, "a replica did not start"
        yield Replicas(a=started["a"], b=started["b"])
    finally:
        for srv in started.values():
            stop_server(srv)
        for srv in started.values():
            assert "Traceback" not in srv.log(), srv.log()[-4000:]


# -- every route has a client method ---------------------------------------------------------


def test_every_route_has_a_client_method(replicas: Replicas) -> None:
    schema = httpx.get(replicas.a.base_url + "/openapi.json", timeout=10).json()
    verbs = {"get", "post", "put", "patch", "delete"}
    live = {
        (verb.upper(), path)
        for path, item in schema["paths"].items()
        if path.startswith("/v1/")
        for verb in item
        if verb in verbs
    }
    unmapped = live - ROUTES.keys() - FOREIGN_ROUTES - OPERATOR_ROUTES
    assert sorted(unmapped) == [], "routes without a client method"
    assert sorted(ROUTES.keys() - live) == [], "mapped routes the server does not have"
    for client in (AsyncSessionClient, SessionClient):
        missing = sorted(m for m in METHODS if not callable(getattr(client, m, None)))
        assert missing == [], f"{client.__name__} lacks {missing}"
        public = {m for m in dir(client) if not m.startswith("_") and callable(getattr(client, m))}
        assert sorted(public - METHODS - NOT_ROUTES) == [], "client methods mapped to no route"


# -- the async client, every method ----------------------------------------------------------


class Recorded:
    """Records which client methods a test called."""

    def __init__(self, client: Any, calls: set[str]) -> None:
        self._client, self._calls = client, calls

    def __getattr__(self, name: str) -> Any:
        self._calls.add(name)
        return getattr(self._client, name)


async def _first(frames: AsyncIterator[Frame], until: Any) -> list[Frame]:
    """Frames with an id until `until(frame)` is true (then the stream is closed)."""
    seen: list[Frame] = []
    async with contextlib.aclosing(frames) as it:  # type: ignore[type-var]
        async for frame in it:
            if frame.id is not None:
                seen.append(frame)
                if until(frame):
                    return seen
    raise AssertionError("stream ended")


async def _wait_exited(asr: Any, sid: str, pid: str) -> ProcessRead:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        proc = await asr.get_process(sid, pid)
        if proc.status != "running":
            return proc
        await asyncio.sleep(0.05)
    raise AssertionError(f"process {pid} still running")


async def test_async_client_calls_every_method(
    replicas: Replicas, tenant: TenantKey, other_tenant: TenantKey
) -> None:
    calls: set[str] = set()
    async with (
        AsyncSessionClient(replicas.a.base_url, api_key=tenant.key) as raw,
        AsyncSessionClient(replicas.a.base_url, api_key=other_tenant.key) as stranger,
        AsyncSessionClient(replicas.b.base_url, api_key=tenant.key) as on_b,
    ):
        asr = Recorded(raw, calls)

        # sessions
        created = await asr.create_session(
            metadata={"user": "alice"}, binding={"workspace": "w1"}, idempotency_key="k-1"
        )
        assert isinstance(created, SessionRead) and created.last_seq == 1
        sid = created.session_id
        again = await asr.create_session(
            metadata={"user": "alice"}, binding={"workspace": "w1"}, idempotency_key="k-1"
        )
        assert again.session_id == sid
        with pytest.raises(ValidationError) as reused:
            await asr.create_session(metadata={"user": "bob"}, idempotency_key="k-1")
        assert reused.value.status == 422 and reused.value.code == "idempotency_key_reused"
        with pytest.raises(ValidationError):
            await asr.create_session(session_id="not a valid id!")
        listed = await asr.list_sessions(metadata={"user": "alice"}, limit=10)
        assert isinstance(listed, SessionList) and [s.session_id for s in listed.data] == [sid]
        patched = await asr.update_session(sid, metadata={"team": "a"}, max_items=50)
        assert isinstance(patched, SessionRead)
        assert patched.metadata == {"user": "alice", "team": "a"} and patched.max_items == 50
        assert (await asr.get_session(sid)).version == patched.version

        appended = await asr.append_items(sid, [USER, USER], expected_seq=patched.last_seq)
        assert isinstance(appended, AppendRead) and appended.last_seq == patched.last_seq + 1
        with pytest.raises(ConflictError) as conflict:
            await asr.append_items(sid, [USER], expected_seq=1)
        assert conflict.value.code == "seq_conflict"
        assert conflict.value.problem["current_seq"] == appended.last_seq
        page = await asr.list_events(sid, types=["MEMORY_ITEMS_APPENDED"])
        assert isinstance(page, EventList) and [e.seq for e in page.data] == [appended.last_seq]
        exported = [e async for e in asr.export_events(sid)]
        assert [e["seq"] for e in exported] == list(range(1, appended.last_seq + 1))
        bulk = [line async for line in asr.export_sessions()]
        assert bulk[-1]["kind"] == "end" and bulk[-1]["sessions"] >= 1
        mine = [e["seq"] for e in bulk if e["kind"] == "event" and e["session_id"] == sid]
        assert mine == list(range(1, appended.last_seq + 1))

        state = await asr.get_state(sid)
        assert isinstance(state, StateRead) and len(state.memory.items) == 2
        with pytest.raises(PreconditionFailedError) as stale:
            await asr.save(sid, if_match=state.version - 1)
        assert stale.value.status == 412
        saved = await asr.save(sid, if_match=state.version)
        assert isinstance(saved, SaveRead) and saved.snapshot_seq == state.seq + 1
        with pytest.raises(ConflictError) as mismatch:
            await asr.resume(sid, binding={"workspace": "elsewhere"})
        assert mismatch.value.code == "binding_mismatch"
        resumed = await asr.resume(sid, binding={"workspace": "w1"})
        assert isinstance(resumed, StateRead) and resumed.memory == state.memory

        assert await asr.get_shared_state(sid) == {}
        shared = await asr.put_shared_state(sid, {"todos": ["plan"]})
        assert shared == {"todos": ["plan"]}
        step = [{"op": "add", "path": "/todos/-", "value": "ship"}]
        shared = await asr.patch_shared_state(sid, step, idempotency_key="k-state")
        assert shared == await asr.get_shared_state(sid) == {"todos": ["plan", "ship"]}
        with pytest.raises(ValidationError) as bad_patch:
            await asr.patch_shared_state(sid, [{"op": "remove", "path": "/missing"}])
        assert bad_patch.value.code == "invalid_patch"
        with pytest.raises(PreconditionFailedError):
            await asr.put_shared_state(sid, {}, if_match=1)

        child = await asr.fork(sid, at_seq=1)
        assert isinstance(child, SessionRead) and child.parent_session_id == sid
        assert child.counts.items == 0
        restored = await asr.restore(child.session_id, state.model_dump(mode="json"))
        assert isinstance(restored, StateRead) and restored.memory.items == state.memory.items
        projection = await asr.projection(sid)
        assert isinstance(projection, ProjectionRead) and projection.equals_live
        memory = await asr.memory(sid, full=True)
        assert isinstance(memory, MemoryView) and memory.history is not None
        compacted = await asr.compact(sid, strategy="truncate", keep_last=1)
        assert isinstance(compacted, CompactRead) and compacted.items == 1
        context = await asr.context(sid, max_input_tokens=1000)
        assert isinstance(context, ContextRead) and len(context.items) == 1
        assert await asr.delete_session(child.session_id) is None
        with pytest.raises(NotFoundError) as gone:
            await asr.get_session(child.session_id)
        assert gone.value.code == "session_not_found"

        # runs
        done = await asr.run(sid, "hello", idempotency_key="r-1")
        assert isinstance(done, RunRead)
        assert (done.status, done.stop_reason, done.output) == (
            "finished",
            "COMPLETED",
            "echo: hello",
        )
        frames = [f async for f in asr.stream_run(sid, "[words:3]")]
        assert 1 <= [f.event for f in frames].count("delta") <= 3  # coalesced
        assert "".join(f.data["text"] for f in frames if f.event == "delta") == "word1 word2 word3"
        assert frames[-1].event == "RUN_FINISHED"
        slow = await asr.run(sid, "[sleep:5000] later", mode="background")
        assert isinstance(slow, RunRead) and slow.status in ("queued", "running")
        with pytest.raises(ConflictError) as busy:
            await asr.run(sid, "again")
        assert busy.value.code == "run_in_progress"
        cancelled = await asr.cancel_run(sid, slow.run_id)
        assert isinstance(cancelled, RunRead) and cancelled.stop_reason == "INTERRUPTED"
        assert (await asr.get_run(sid, slow.run_id)).stop_reason == "INTERRUPTED"
        with pytest.raises(NotFoundError):
            await asr.get_run(sid, "run_missing")

        asked = await asr.run(sid, '[tool:lookup {"q": "x"}]', client_tools=[{"name": "lookup"}])
        assert asked.stop_reason == "NEEDS_USER_INPUT" and len(asked.pending) == 1
        call_id = asked.pending[0].call_id
        answered = await asr.submit_tool_outputs(sid, [{"call_id": call_id, "output": "found"}])
        assert isinstance(answered, RunRead) and answered.stop_reason == "COMPLETED"
        replaced = await asr.submit_tool_outputs(
            sid, [{"call_id": call_id, "output": "found again"}], replace=True
        )
        assert isinstance(replaced, ContinueRead) and replaced.run is None
        with pytest.raises(ConflictError):
            await asr.submit_tool_outputs(sid, [{"call_id": "nope", "output": "x"}])

        blocked = await asr.run(sid, '[tool:echo {"text": "x"}]', approval_required=["echo"])
        assert blocked.stop_reason == "BLOCKED_BY_APPROVAL"
        approved = await asr.decide_approval(sid, blocked.pending[0].call_id, "approve")
        assert isinstance(approved, RunRead) and approved.stop_reason == "COMPLETED"
        blocked = await asr.run(sid, '[tool:echo {"text": "y"}]', approval_required=["echo"])
        rejected = await asr.decide_approval(
            sid, blocked.pending[0].call_id, "reject", reason="no", continue_run=False
        )
        assert isinstance(rejected, ContinueRead) and rejected.run is None
        with pytest.raises(ValidationError):
            await asr.decide_approval(sid, "c", "maybe")

        runs = await asr.list_runs(sid)
        assert isinstance(runs, RunList) and runs.data[-1].run_id == done.run_id
        usage = await asr.usage(sid)
        assert isinstance(usage, UsageRead) and len(usage.runs) == len(runs.data)
        once = await asr.run_once("hi", keep=True)
        assert isinstance(once, RunRead) and once.output == "echo: hi"
        assert (await asr.get_session(once.session_id)).metadata == {"one_shot": True}

        # delegation
        delegated = await asr.delegate(sid, "sub task", metadata={"k": "v"})
        assert isinstance(delegated, DelegateRead)
        assert delegated.session.parent_session_id == sid
        assert delegated.session.binding == {"workspace": "w1"}
        assert delegated.run.output == "echo: sub task"

        # processes (on replica a; b has them off)
        cat = await asr.start_process(sid, "cat", idempotency_key="p-1")
        assert isinstance(cat, ProcessRead) and cat.status == "running"
        wrote = await asr.write_stdin(sid, cat.process_id, "hello\n", eof=True)
        assert isinstance(wrote, StdinRead) and wrote.bytes_written == 6
        ended = await _wait_exited(asr, sid, cat.process_id)
        assert (ended.status, ended.exit_code) == ("exited", 0)
        logs = await asr.process_logs(sid, cat.process_id, offset=0)
        assert isinstance(logs, ProcessLogs) and logs.data == "hello\n" and logs.eof
        with pytest.raises(ConflictError) as not_running:
            await asr.write_stdin(sid, cat.process_id, "more")
        assert not_running.value.code == "process_not_running"
        sleeper = await asr.start_process(sid, "sleep 30")
        stopped = await asr.stop_process(sid, sleeper.process_id)
        assert isinstance(stopped, ProcessRead) and stopped.status == "exited"
        assert stopped.reason == "stopped"
        procs = await asr.list_processes(sid)
        assert isinstance(procs, ProcessList)
        assert {p.process_id for p in procs.data} == {cat.process_id, sleeper.process_id}
        with pytest.raises(ValidationError) as refused:
            await asr.start_process(sid, "rm -rf /")
        assert refused.value.code == "command_not_allowed"
        with pytest.raises(NotFoundError) as disabled:
            await on_b.list_processes(sid)
        assert disabled.value.code == "processes_disabled"

        # catalogue
        tools = await asr.list_tools()
        assert isinstance(tools, ToolList)
        assert {"echo", "delegate", "shell"} <= {t.name for t in tools.data}
        assert "shell" not in {t.name for t in (await on_b.list_tools()).data}
        models = await asr.list_models()
        assert isinstance(models, ModelProfileList)
        assert {"scripted", "openai"} <= {m.name for m in models.data}
        agents = await asr.list_agents()
        assert isinstance(agents, AgentList) and [a.name for a in agents.data] == ["helper"]
        assert agents.data[0].agent.tools == ["echo"]
        event_types = await asr.list_event_types()
        assert isinstance(event_types, EventTypeList)
        assert [t.type for t in event_types.data] == [str(t) for t in EventType]

        # streams
        token = await asr.create_stream_token(session_id=sid, ttl_seconds=60)
        assert isinstance(token, StreamTokenRead) and token.session_id == sid
        last = (await asr.get_session(sid)).last_seq
        timeline = await _first(asr.stream_events(sid, after_seq=0), lambda f: f.id == str(last))
        assert [int(f.id) for f in timeline] == list(range(1, last + 1))
        assert timeline[0].event == "SESSION_CREATED" and timeline[0].data["seq"] == 1
        runs_only = await _first(
            asr.stream_events(sid, after_seq=0, types=["RUN_FINISHED"]),
            lambda f: f.data["run_id"] == approved.run_id,
        )
        assert {f.event for f in runs_only} == {"RUN_FINISHED"}
        with pytest.raises(ValidationError) as beyond:
            await _first(asr.stream_events(sid, after_seq=last + 5), lambda f: True)
        assert beyond.value.code == "cursor_out_of_range"
        tenant_frames = await _first(asr.stream_tenant_events(), lambda f: f.data["seq"] == 3)
        assert tenant_frames[0].data["session_id"] == sid and tenant_frames[0].id
        later = await _first(
            asr.stream_tenant_events(after=tenant_frames[0].id, types=["SESSION_CREATED"]),
            lambda f: True,
        )
        assert later[0].event == "SESSION_CREATED" and later[0].data["session_id"] != sid

        # schedules (on a session of their own: no run of the above is in their way)
        target = (await asr.create_session()).session_id
        schedule = await asr.create_schedule(
            session_id=target,
            input="tick",
            cron="0 9 * * 1-5",
            timezone="Europe/Paris",
            idempotency_key="k-schedule",
        )
        assert isinstance(schedule, ScheduleRead) and schedule.status == "active"
        with pytest.raises(ValidationError) as bad_cron:
            await asr.create_schedule(session_id=target, cron="61 * * * *")
        assert bad_cron.value.code == "invalid_schedule"
        schedules = await asr.list_schedules(limit=10)
        assert isinstance(schedules, ScheduleList)
        assert [s.schedule_id for s in schedules.data] == [schedule.schedule_id]
        assert (await asr.get_schedule(schedule.schedule_id)).timezone == "Europe/Paris"
        changed = await asr.update_schedule(schedule.schedule_id, interval_seconds=3600)
        assert changed.cron is None and changed.interval_seconds == 3600
        assert (await asr.pause_schedule(schedule.schedule_id)).status == "paused"
        assert (await asr.resume_schedule(schedule.schedule_id)).status == "active"
        fired = await asr.trigger_schedule(schedule.schedule_id)
        assert isinstance(fired, ScheduleFireRead) and fired.outcome == "started"
        fires = await asr.list_schedule_runs(schedule.schedule_id)
        assert isinstance(fires, ScheduleFireList)
        assert [f.run_id for f in fires.data] == [fired.run_id]
        with pytest.raises(NotFoundError):
            await stranger.get_schedule(schedule.schedule_id)
        await asr.delete_schedule(schedule.schedule_id)
        with pytest.raises(NotFoundError):
            await asr.get_schedule(schedule.schedule_id)

        # webhooks (to a loopback port nothing listens on: the delivery stays pending)
        hooked = (await asr.create_session()).session_id
        hook = await asr.create_webhook(
            "http://127.0.0.1:9/hook",
            ["MEMORY_ITEMS_APPENDED"],
            session_id=hooked,
            idempotency_key="k-webhook",
        )
        assert isinstance(hook, WebhookCreated) and hook.secret.startswith("whsec_")
        await asr.append_items(hooked, [USER])
        hooks = await asr.list_webhooks(limit=10)
        assert [h.webhook_id for h in hooks.data] == [hook.webhook_id]
        assert (await asr.get_webhook(hook.webhook_id)).url == "http://127.0.0.1:9/hook"
        assert (await asr.update_webhook(hook.webhook_id, {"description": "ci"})).description
        deliveries = await asr.list_webhook_deliveries(hook.webhook_id)
        assert [d.event_type for d in deliveries.data] == ["MEMORY_ITEMS_APPENDED"]
        first = deliveries.data[0]
        got = await asr.get_webhook_delivery(hook.webhook_id, first.delivery_id)
        assert got.seq == first.seq
        assert (await asr.redeliver_webhook(hook.webhook_id, first.delivery_id)).attempts >= 0
        with pytest.raises(NotFoundError):
            await stranger.get_webhook(hook.webhook_id)
        await asr.delete_webhook(hook.webhook_id)

        # another tenant's session is a 404 on every session route, streams included
        for call in (
            lambda: stranger.get_session(sid),
            lambda: stranger.list_events(sid),
            lambda: stranger.append_items(sid, [USER]),
            lambda: stranger.run(sid, "x"),
            lambda: stranger.get_run(sid, done.run_id),
            lambda: stranger.cancel_run(sid, done.run_id),
            lambda: stranger.delegate(sid, "x"),
            lambda: stranger.list_processes(sid),
            lambda: stranger.get_process(sid, cat.process_id),
            lambda: stranger.process_logs(sid, cat.process_id),
            lambda: stranger.create_stream_token(session_id=sid),
            lambda: _first(stranger.stream_events(sid), lambda f: True),
        ):
            with pytest.raises(NotFoundError):
                await call()
        with pytest.raises(NotFoundError):
            async for _ in stranger.export_events(sid):
                pass
        with pytest.raises(NotFoundError):
            async for _ in stranger.stream_run(sid, "x"):
                pass

    async with AsyncSessionClient(replicas.a.base_url, api_key="asr_wrong") as anonymous:
        with pytest.raises(AuthenticationError) as unauthorized:
            await anonymous.list_sessions()
        assert unauthorized.value.status == 401
    assert sorted(METHODS - calls) == [], "client methods this test did not call"


# -- the sync client: a representative subset, and its streams ---------------------------------


async def test_sync_client(replicas: Replicas, tenant: TenantKey, other_tenant: TenantKey) -> None:
    def work() -> None:
        with (
            SessionClient(replicas.a.base_url, api_key=tenant.key) as asr,
            SessionClient(replicas.a.base_url, api_key=other_tenant.key) as stranger,
        ):
            session = asr.create_session(metadata={"user": "sync"})
            assert isinstance(session, SessionRead)
            sid = session.session_id
            assert isinstance(asr.append_items(sid, [USER]), AppendRead)
            with pytest.raises(ConflictError):
                asr.append_items(sid, [USER], expected_seq=1)
            with pytest.raises(PreconditionFailedError):
                asr.save(sid, if_match=0)
            run = asr.run(sid, "[ask]")
            assert isinstance(run, RunRead) and run.stop_reason == "NEEDS_USER_INPUT"
            assert asr.memory(sid).items[-1]["content"].endswith("?")
            frames = list(asr.stream_run(sid, "[words:2]"))
            deltas = [f.data["text"] for f in frames if f.event == "delta"]
            assert deltas and "".join(deltas) == "word1 word2"
            assert isinstance(asr.list_runs(sid), RunList)
            assert isinstance(asr.usage(sid), UsageRead)
            assert isinstance(asr.list_tools(), ToolList)
            assert isinstance(asr.create_stream_token(), StreamTokenRead)
            exported = list(asr.export_events(sid))
            last = exported[-1]["seq"]
            assert [e["seq"] for e in exported] == list(range(1, last + 1))
            ids = []
            for frame in asr.stream_events(sid, after_seq=0, deltas=True):
                if frame.id is not None:
                    ids.append(int(frame.id))
                if frame.id == str(last):
                    break
            assert ids == list(range(1, last + 1))
            for frame in asr.stream_tenant_events(types=["SESSION_CREATED"]):
                assert frame.data["session_id"] == sid
                break
            with pytest.raises(NotFoundError):
                stranger.get_session(sid)
            with pytest.raises(NotFoundError):
                next(iter(stranger.stream_events(sid)))

    await asyncio.to_thread(work)


# -- streams resume after a real drop ----------------------------------------------------------


def _hostport(server: Server) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").split(":")
    return host, int(port)


class CuttableProxy:
    """A loopback TCP proxy in front of one replica at a time. `cut()` aborts every proxied
    connection (RST both ways); new connections go to whichever `upstream` is set then.
    `cut_inside(seq, to=...)` arms a cut in the middle of a frame: the next connection that
    carries `id: <seq>` forwards that line, then is aborted (the frame's data never arrives).
    """

    def __init__(self, upstream: Server) -> None:
        self.upstream = upstream
        self.heads: list[str] = []  # the request head of each proxied connection
        self._live: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inside: tuple[re.Pattern[bytes], Server] | None = None
        self.shutdown_frames = 0  # `event: shutdown` frames that passed through

    @property
    def connections(self) -> int:
        return len(self.heads)

    async def __aenter__(self) -> CuttableProxy:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        self._server.close()
        await self._server.wait_closed()

    def cut(self, *, to: Server | None = None) -> None:
        if to is not None:
            self.upstream = to
        for pair in list(self._live):
            for writer in pair:
                writer.transport.abort()

    def cut_inside(self, seq: int, *, to: Server) -> None:
        self._inside = (re.compile(rb"id: %d\r?\n" % seq), to)

    def _partial(self, data: bytes) -> bytes | None:
        """The bytes to forward before a mid-frame cut, if `data` holds the armed id."""
        self.shutdown_frames += data.count(b"event: shutdown")
        if self._inside is None:
            return None
        pattern, to = self._inside
        found = pattern.search(data)
        if found is None:
            return None
        self._inside, self.upstream = None, to
        return data[: found.end()]

    def cut_threadsafe(self, *, to: Server | None = None) -> None:
        assert self._loop is not None
        done = threading.Event()

        def run() -> None:
            self.cut(to=to)
            done.set()

        self._loop.call_soon_threadsafe(run)
        assert done.wait(5)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*_hostport(self.upstream))
        except OSError:
            client_w.transport.abort()
            return
        pair = (client_w, up_w)
        self._live.add(pair)
        try:
            head = await client_r.readuntil(b"\r\n\r\n")
            self.heads.append(head.decode("latin-1"))
            up_w.write(head)
            await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w, self._partial))
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._live.discard(pair)
            for writer in pair:
                writer.transport.abort()


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    partial: Callable[[bytes], bytes | None] = lambda data: None,
) -> None:
    try:
        while data := await reader.read(65536):
            head = partial(data)
            if head is not None:
                writer.write(head)
                await writer.drain()
                return  # and abort, in the middle of the frame
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.transport.abort()


def _last_event_id(head: str) -> str | None:
    found = re.search(r"(?im)^last-event-id: *(\S+)\r?$", head)
    return found.group(1) if found else None


async def _append(asr: AsyncSessionClient, sid: str, n: int) -> int:
    last = 0
    for i in range(n):
        last = (await asr.append_items(sid, [{**USER, "content": f"m{i}"}])).last_seq
    return last


async def _until(probe: Callable[[], bool], *, within: float) -> None:
    deadline = time.monotonic() + within
    while not probe():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def _check_resumes(
    proxy: CuttableProxy, by_conn: dict[int, list[str]], first: str | None, *, cuts: int = 2
) -> None:
    """Each reconnect asked for exactly the id its previous connection ended on."""
    assert len(by_conn) == cuts + 1, by_conn  # every cut really happened
    assert _last_event_id(proxy.heads[0]) == first
    conns = sorted(by_conn)
    for before, after in itertools.pairwise(conns):
        assert _last_event_id(proxy.heads[after - 1]) == by_conn[before][-1], proxy.heads


async def test_session_stream_resumes_across_cuts(replicas: Replicas, store: Stores) -> None:
    """Three drops: after the replay was read (to replica b), in the middle of frame 9 (back
    to a), and while following live (to b). The ids are the ledger's 1..N, none twice."""
    tenant = await make_tenant(store)
    async with (
        CuttableProxy(replicas.a) as proxy,
        AsyncSessionClient(replicas.a.base_url, api_key=tenant.key) as direct,
        AsyncSessionClient(proxy.base_url, api_key=tenant.key) as via,
    ):
        sid = (await direct.create_session()).session_id
        await _append(direct, sid, 5)  # seq 2..6 before the stream opens
        total = 14
        by_conn: dict[int, list[str]] = {}
        ids: list[int] = []
        stream = via.stream_events(sid, after_seq=0)
        async with contextlib.aclosing(stream) as frames:  # type: ignore[type-var]
            async for frame in frames:
                assert frame.id is not None, frame  # no control frame reaches the caller
                assert frame.data["seq"] == int(frame.id)
                by_conn.setdefault(proxy.connections, []).append(frame.id)
                ids.append(int(frame.id))
                if ids[-1] == 3 and proxy.connections == 1:
                    proxy.cut(to=replicas.b)  # writes land while it is down
                    proxy.cut_inside(9, to=replicas.a)
                    await _append(direct, sid, 4)  # seq 7..10
                if ids[-1] == 10 and proxy.connections == 3:
                    await _append(direct, sid, 2)  # 11, 12 arrive live
                if ids[-1] == 12:
                    proxy.cut(to=replicas.b)
                    await _append(direct, sid, 2)  # 13, 14 while it is down
                if ids[-1] == total:
                    break
        ledger = [e["seq"] async for e in direct.export_events(sid)]
    assert ids == ledger == list(range(1, total + 1))
    assert by_conn[2][-1] == "8" and by_conn[3][0] == "9", by_conn  # 9 was cut in half
    _check_resumes(proxy, by_conn, "0", cuts=3)


async def test_session_stream_comes_back_after_a_shutdown_frame(
    replicas: Replicas, store: Stores, database_url: str, tmp_path: Path
) -> None:
    """SIGTERM a third replica mid-stream: it says `event: shutdown` (no id); the client does
    not yield it, and comes back through the proxy (now to replica a) from its last id."""
    tenant = await make_tenant(store)
    doomed = await asyncio.to_thread(start_server, database_url, tmp_path / "c.log", **SSE_ENV)
    try:
        async with (
            CuttableProxy(doomed) as proxy,
            AsyncSessionClient(replicas.a.base_url, api_key=tenant.key) as direct,
            AsyncSessionClient(proxy.base_url, api_key=tenant.key) as via,
        ):
            sid = (await direct.create_session()).session_id
            await _append(direct, sid, 2)
            by_conn: dict[int, list[str]] = {}
            ids: list[int] = []
            stream = via.stream_events(sid, after_seq=0)
            async with contextlib.aclosing(stream) as frames:  # type: ignore[type-var]
                async for frame in frames:
                    assert frame.id is not None, frame
                    by_conn.setdefault(proxy.connections, []).append(frame.id)
                    ids.append(int(frame.id))
                    if ids[-1] == 3 and proxy.connections == 1:
                        proxy.upstream = replicas.a
                        doomed.process.terminate()
                        # Write only once it said goodbye (else, on PostgreSQL, its NOTIFY
                        # could deliver 4 and 5 live before the SIGTERM lands).
                        await _until(lambda: proxy.shutdown_frames == 1, within=10)
                        await _append(direct, sid, 2)  # 4, 5
                    if ids[-1] == 5:
                        break
    finally:
        await asyncio.to_thread(stop_server, doomed)
    assert "Traceback" not in doomed.log(), doomed.log()[-4000:]
    assert ids == [1, 2, 3, 4, 5]
    assert proxy.shutdown_frames == 1
    _check_resumes(proxy, by_conn, "0", cuts=1)


async def test_tenant_stream_resumes_across_cuts(replicas: Replicas, store: Stores) -> None:
    tenant = await make_tenant(store)
    async with (
        CuttableProxy(replicas.b) as proxy,
        AsyncSessionClient(replicas.a.base_url, api_key=tenant.key) as direct,
        AsyncSessionClient(proxy.base_url, api_key=tenant.key) as via,
    ):
        one = (await direct.create_session()).session_id
        two = (await direct.create_session()).session_id
        await _append(direct, one, 2)
        await _append(direct, two, 2)  # 6 events before the stream opens
        total = 10  # 5 events in each session
        by_conn: dict[int, list[str]] = {}
        seen: list[tuple[str, int]] = []
        stream = via.stream_tenant_events()
        async with contextlib.aclosing(stream) as frames:  # type: ignore[type-var]
            async for frame in frames:
                assert frame.id is not None, frame
                by_conn.setdefault(proxy.connections, []).append(frame.id)
                seen.append((frame.data["session_id"], frame.data["seq"]))
                if len(seen) == 2 and proxy.connections == 1:
                    proxy.cut(to=replicas.a)
                    await _append(direct, one, 2)
                if len(seen) == 8 and proxy.connections == 2:
                    proxy.cut(to=replicas.b)
                    await _append(direct, two, 2)
                if len(seen) == total:
                    break
    # Each session whole and in order, nothing twice, nothing else.
    assert [s for s in seen if s[0] == one] == [(one, n) for n in range(1, 6)]
    assert [s for s in seen if s[0] == two] == [(two, n) for n in range(1, 6)]
    assert len(seen) == len(set(seen)) == total
    _check_resumes(proxy, by_conn, None)


async def test_sync_stream_resumes_after_a_cut(replicas: Replicas, store: Stores) -> None:
    tenant = await make_tenant(store)
    async with CuttableProxy(replicas.a) as proxy:

        def work() -> tuple[list[int], dict[int, list[str]]]:
            with (
                SessionClient(replicas.a.base_url, api_key=tenant.key) as direct,
                SessionClient(proxy.base_url, api_key=tenant.key) as via,
            ):
                sid = direct.create_session().session_id
                direct.append_items(sid, [USER])
                ids: list[int] = []
                by_conn: dict[int, list[str]] = {}
                for frame in via.stream_events(sid, after_seq=1):
                    assert frame.id is not None
                    by_conn.setdefault(proxy.connections, []).append(frame.id)
                    ids.append(int(frame.id))
                    if ids[-1] == 2 and proxy.connections == 1:
                        proxy.cut_threadsafe(to=replicas.b)
                        direct.append_items(sid, [USER])  # 3
                    if ids[-1] == 3 and proxy.connections == 2:
                        proxy.cut_threadsafe(to=replicas.a)
                        direct.append_items(sid, [USER])  # 4
                    if ids[-1] == 4:
                        break
                return ids, by_conn

        ids, by_conn = await asyncio.to_thread(work)
    assert ids == [2, 3, 4]
    _check_resumes(proxy, by_conn, "1")


# -- the README example, as written ------------------------------------------------------------


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    marker = text.index("<!-- client-example")
    block = re.search(r"```python\n(.*?)```", text[marker:], re.S)
    assert block is not None, "no python block after the client-example marker"
    return block.group(1)


async def test_readme_client_example_runs(replicas: Replicas, tenant: TenantKey) -> None:
    env = {
        **os.environ,
        "ASR_URL": replicas.a.base_url,
        "ASR_KEY": tenant.key,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "clients" / "python"), str(ROOT)]),
    }
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", readme_example()],
        cwd=Path(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    out = result.stdout.splitlines()
    assert out[0] == "COMPLETED echo: hello", result.stdout
    # Deltas are coalesced: their texts, in order, are the answer.
    deltas = [line[len("delta ") :] for line in out if line.startswith("delta ")]
    assert deltas and "".join(deltas) == "word1 word2 word3", result.stdout
    assert out[1].startswith("RUN_STARTED "), result.stdout
    assert out[-1].startswith("RUN_FINISHED "), result.stdout
