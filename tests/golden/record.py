"""Record golden ledgers (R25): `python -m tests.golden.record [--force]`.

Drives the current service in-process (SQLite in a temporary folder, the scripted model)
through scenarios that together emit every event type, and writes each session as an
export (`<name>.jsonl`, the `asr sessions export` format) beside the state the service
reported (`<name>.state.json`). `tests/test_golden_ledgers.py` folds every file with the
projector of the day and must get the recorded state back.

Golden files are frozen: existing ones are never rewritten (unless --force, which is for a
deliberate, reviewed change of the fold). When the event vocabulary grows, record a new
file (name it after the release or schema version); keep the old ones, since old ledgers
stay in databases forever.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx

from app.main import create_app
from app.runtime.session.transfer import export_ledger
from app.services import services_of
from app.settings import Settings
from app.store.migrations import upgrade_head
from tests.conftest import make_tenant

HERE = Path(__file__).parent / "ledgers"
USER = {"type": "message", "role": "user"}

# Written by hand: types no scenario emits yet (processes), and a type from the future, which
# every reader must skip.
HANDWRITTEN = [
    ("SESSION_CREATED", {"metadata": {}, "agent": {}, "binding": {}}),
    ("USER_INPUT", {"item": {**USER, "content": "run the build"}}),
    ("PROCESS_STARTED", {"process_id": "p1", "command": ["make"], "cwd": "/w"}),
    ("FUTURE_EVENT_TYPE_V9", {"anything": [1, 2, 3]}),
    ("PROCESS_EXITED", {"process_id": "p1", "exit_code": 0}),
    (
        "MEMORY_ITEMS_APPENDED",
        {"items": [{"type": "message", "role": "assistant", "content": "ok"}]},
    ),
]


async def _post(c: httpx.AsyncClient, path: str, body: Any = None) -> dict[str, Any]:
    response = await c.post(path, json=body)
    assert response.is_success, (path, response.status_code, response.text)
    return response.json()


async def _run(c: httpx.AsyncClient, sid: str, text: str, **extra: Any) -> dict[str, Any]:
    return await _post(c, f"/v1/sessions/{sid}/runs", {"input": text, "mode": "wait", **extra})


async def _memory_session(c: httpx.AsyncClient) -> tuple[str, str]:
    sid = (await _post(c, "/v1/sessions", {"metadata": {"golden": "memory"}, "max_items": 6}))[
        "session_id"
    ]
    call = {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "c1", "output": "18C"}
    for batch in (
        [{**USER, "content": "weather?"}, call, out],
        [{"type": "message", "role": "assistant", "content": "18C"}],
        [{**USER, "content": "and tomorrow?"}],
        [
            {**USER, "content": "and after?"},
            {"type": "message", "role": "assistant", "content": "?"},
        ],
    ):
        await _post(c, f"/v1/sessions/{sid}/items", {"items": batch})
    response = await c.patch(f"/v1/sessions/{sid}", json={"metadata": {"n": 1}})
    assert response.is_success
    await _post(c, f"/v1/sessions/{sid}/save")
    await _post(c, f"/v1/sessions/{sid}/resume", {})
    state = (await c.get(f"/v1/sessions/{sid}/state")).json()
    state["memory"]["items"] = state["memory"]["items"][-2:]
    await _post(c, f"/v1/sessions/{sid}/restore", {"state": state})
    fork = await _post(c, f"/v1/sessions/{sid}/fork", {"at_seq": 4})
    await _post(
        c, f"/v1/sessions/{fork['session_id']}/items", {"items": [{**USER, "content": "b"}]}
    )
    return sid, fork["session_id"]


async def _runs_session(c: httpx.AsyncClient) -> str:
    sid = (await _post(c, "/v1/sessions", {"metadata": {"golden": "runs"}}))["session_id"]
    await _run(c, sid, "hello")
    await _run(c, sid, '[tool:arithmetic {"op": "add", "a": 2, "b": 3}]')
    await _run(c, sid, "[continue:2] go on")
    await _run(c, sid, "[words:12]")
    await _run(c, sid, "[ask] which one")
    await _run(c, sid, "that one")
    blocked = await _run(c, sid, '[tool:echo {"text": "hi"}]', approval_required=["echo"])
    assert blocked["stop_reason"] == "BLOCKED_BY_APPROVAL", blocked
    call_id = blocked["pending"][0]["call_id"]
    await _post(c, f"/v1/sessions/{sid}/approvals", {"call_id": call_id, "decision": "approve"})
    tool_error = await _run(c, sid, '[tool:fail {"message": "boom"}]', on_tool_error="stop")
    assert tool_error["stop_reason"] == "BLOCKED_BY_TOOL_ERROR", tool_error
    failed = await c.post(f"/v1/sessions/{sid}/runs", json={"input": "[fail]", "mode": "wait"})
    assert failed.json()["status"] == "failed", failed.text
    await _post(
        c,
        f"/v1/sessions/{sid}/tool-outputs",
        {"outputs": [{"call_id": call_id, "output": "redacted"}], "replace": True},
    )
    await _post(c, f"/v1/sessions/{sid}/compact", {"strategy": "summarize", "keep_last": 2})
    return sid


async def _interrupted_session(c: httpx.AsyncClient) -> str:
    sid = (await _post(c, "/v1/sessions", {"metadata": {"golden": "interrupted"}}))["session_id"]
    started = await _post(
        c, f"/v1/sessions/{sid}/runs", {"input": '[tool:sleep {"ms": 5000}]', "mode": "background"}
    )
    for _ in range(100):
        events = (await c.get(f"/v1/sessions/{sid}/events")).json()["data"]
        if any(e["type"] == "TOOL_CALL" for e in events):
            break
        await asyncio.sleep(0.05)
    await _post(c, f"/v1/sessions/{sid}/runs/{started['run_id']}/cancel")
    await _run(c, sid, "after the interruption")
    return sid


async def _state_session(c: httpx.AsyncClient) -> str:
    sid = (await _post(c, "/v1/sessions", {"metadata": {"golden": "state"}}))["session_id"]
    put = await c.put(f"/v1/sessions/{sid}/shared-state", json={"todos": ["plan"], "n": 1})
    assert put.is_success, put.text
    patch = [{"op": "add", "path": "/todos/-", "value": "build"}, {"op": "remove", "path": "/n"}]
    patched = await c.patch(f"/v1/sessions/{sid}/shared-state", json=patch)
    assert patched.is_success, patched.text
    await _run(c, sid, '[state:[{"op": "replace", "path": "/todos/0", "value": "done"}]]')
    return sid


# A ledger that starts with a prune's marker, as a session pruned at a snapshot of its empty
# first state reads: the marker at seq 1 stands for that state, and the tail folds on it.
PRUNED_AT_START = [
    ("HISTORY_PRUNED", {"first_seq": 1, "last_seq": 1, "snapshot_seq": 1, "events_pruned": 1}),
    ("USER_INPUT", {"item": {**USER, "content": "after the prune"}}),
    (
        "MEMORY_ITEMS_APPENDED",
        {"items": [{"type": "message", "role": "assistant", "content": "still here"}]},
    ),
]


async def _handwritten(
    app: Any, tenant_id: str, name: str = "handwritten", rows: list[Any] | None = None
) -> str:
    from app.runtime.ports import NewSession
    from app.runtime.session.events import NewEvent

    sid = f"golden-{name}"
    await services_of(app).stores.ledger.create_session(
        tenant_id,
        session=NewSession(session_id=sid, metadata={"golden": name}, agent={}, binding={}),
        events=[NewEvent(kind, payload) for kind, payload in (rows or HANDWRITTEN)],
    )
    return sid


async def record(force: bool) -> list[Path]:
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{tmp}/golden.db"
        await asyncio.to_thread(upgrade_head, url)
        app = create_app(Settings(database_url=url, bootstrap_default_tenant=False))
        async with app.router.lifespan_context(app):
            tenant = await make_tenant(services_of(app).stores)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://golden", headers=tenant.headers, timeout=60
            ) as c:
                memory, fork = await _memory_session(c)
                sessions = {
                    "v1-memory": memory,
                    "v1-fork": fork,
                    "v1-runs": await _runs_session(c),
                    "v1-interrupted": await _interrupted_session(c),
                    "v1-handwritten": await _handwritten(app, tenant.tenant_id),
                    "v2-state": await _state_session(c),
                    "v3-pruned": await _handwritten(
                        app, tenant.tenant_id, "pruned", PRUNED_AT_START
                    ),
                }
            runtime = services_of(app).runtime
            for name, sid in sessions.items():
                ledger, state = HERE / f"{name}.jsonl", HERE / f"{name}.state.json"
                if ledger.exists() and not force:
                    continue
                lines = [line async for line in export_ledger(runtime, tenant.tenant_id, sid)]
                lines[0]["exported_at"] = "golden"
                ledger.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
                loaded = await runtime.load(tenant.tenant_id, sid)
                state.write_text(
                    json.dumps(loaded.state.to_json(), indent=1, sort_keys=True) + "\n"
                )
                written += [ledger, state]
    return written


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.golden.record")
    parser.add_argument("--force", action="store_true", help="rewrite existing golden files")
    args = parser.parse_args()
    HERE.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(record(args.force)):
        print(f"wrote {path.relative_to(HERE.parent.parent.parent)}")


if __name__ == "__main__":
    main()
