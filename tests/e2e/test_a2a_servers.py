"""A2A against two real replicas sharing one database, with the official client (`a2a-sdk`):
the card, a message answered, a stream, a cancel from the other replica, a stream dropped
and re-attached on the other replica (the rest exactly once), a signed push notification for
a task's completion, an approval answered by the next message, and A2A's own error codes."""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Value
from standardwebhooks.webhooks import Webhook

from tests.conftest import ROOT, Server, TenantKey, start_server, stop_server
from tests.loopback import serve
from tests.webhook_receiver import Receiver

REPLICA_ENV = {
    "ASR_WEBHOOKS_ENABLED": "true",
    "ASR_WEBHOOK_ALLOW_NETWORKS": "127.0.0.1/32",
    "ASR_WEBHOOK_POLL_SECONDS": "0.2",
}


@pytest.fixture(scope="module")
def a2a_replicas(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Server]]:
    """Two replicas (the `replicas` fixture's), each delivering webhooks to loopback."""
    folder: Path = tmp_path_factory.mktemp("a2a")
    servers = [
        start_server(database_url, folder / f"r{i}.log", ready_seconds=120, **REPLICA_ENV)
        for i in range(2)
    ]
    yield servers
    for s in servers:
        stop_server(s)


@pytest.fixture
async def https(
    a2a_replicas: list[Server], tenant: TenantKey
) -> AsyncIterator[list[httpx.AsyncClient]]:
    clients = [
        httpx.AsyncClient(base_url=s.base_url, headers=tenant.headers, timeout=60)
        for s in a2a_replicas
    ]
    yield clients
    for c in clients:
        await c.aclose()


def message(text: str | None = None, data: dict | None = None, **ids: str) -> SendMessageRequest:
    part = Part(text=text) if text is not None else Part(data=_value(data or {}))
    m = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[part])
    for key, value in ids.items():
        setattr(m, key, value)
    return SendMessageRequest(message=m)


def _value(data: dict) -> Value:
    value = Value()
    value.struct_value.update(data)
    return value


def answer(task: Task) -> str:
    return "".join(p.text for a in task.artifacts for p in a.parts)


async def client_of(
    http: httpx.AsyncClient, base: str, *, streaming: bool, polling: bool = False
) -> Client:
    return await create_client(
        base, ClientConfig(httpx_client=http, streaming=streaming, polling=polling)
    )


async def test_card_send_and_stream(
    a2a_replicas: list[Server], https: list[httpx.AsyncClient]
) -> None:
    base = a2a_replicas[0].base_url
    client = await client_of(https[0], base, streaming=False)
    [reply] = [r async for r in client.send_message(message("hello"))]
    assert reply.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer(reply.task) == "echo: hello"
    # The task is read on the other replica as on this one.
    other = await client_of(https[1], a2a_replicas[1].base_url, streaming=True)
    got = await other.get_task(GetTaskRequest(id=reply.task.id))
    assert answer(got) == "echo: hello" and got.context_id == reply.task.context_id

    events = [r async for r in other.send_message(message("[words:5]"))]
    assert events[0].HasField("task")
    assert events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
    updates = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert [p.text for a in updates for p in a.parts] == ["word1 word2 word3 word4 word5"]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_cancel_from_the_other_replica(
    a2a_replicas: list[Server], https: list[httpx.AsyncClient]
) -> None:
    starter = await client_of(https[0], a2a_replicas[0].base_url, streaming=False, polling=True)
    [reply] = [r async for r in starter.send_message(message("[sleep:5000] long"))]
    task = reply.task
    assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    other = await client_of(https[1], a2a_replicas[1].base_url, streaming=False)
    cancelled = await other.cancel_task(CancelTaskRequest(id=task.id))
    # CANCELED, not COMPLETED: the run was interrupted, not left to finish its sleep.
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    seen = await starter.get_task(GetTaskRequest(id=task.id))
    assert seen.status.state == TaskState.TASK_STATE_CANCELED


def _message_ids(events: list[StreamResponse]) -> list[str]:
    """The agent messages the WORKING updates brought (the final status restates the last
    one as the task's status message, as A2A's TaskStatus has it)."""
    return [
        e.status_update.status.message.message_id
        for e in events
        if e.HasField("status_update")
        and e.status_update.status.state == TaskState.TASK_STATE_WORKING
        and e.status_update.status.HasField("message")
    ]


async def test_a_dropped_stream_resumes_on_the_other_replica_exactly_once(
    a2a_replicas: list[Server], https: list[httpx.AsyncClient]
) -> None:
    first = await client_of(https[0], a2a_replicas[0].base_url, streaming=True)
    # Four model turns, 600 ms apart.
    stream = first.send_message(message("[continue:3] [sleep:600] go"))
    before: list[StreamResponse] = []
    async for event in stream:
        before.append(event)
        if _message_ids(before):
            break  # the first agent message arrived: drop the stream mid-run
    await stream.aclose()
    task_id = before[0].task.id
    assert len(_message_ids(before)) == 1

    second = await client_of(https[1], a2a_replicas[1].base_url, streaming=True)
    after = [e async for e in second.subscribe(SubscribeToTaskRequest(id=task_id))]
    snapshot = after[0].task
    assert snapshot.id == task_id
    assert snapshot.status.state == TaskState.TASK_STATE_WORKING
    in_snapshot = [m.message_id for m in snapshot.history if m.role == Role.ROLE_AGENT]
    later = _message_ids(after[1:])
    # Each later update is new: none repeats the snapshot, none comes twice.
    assert not set(later) & set(in_snapshot) and len(later) == len(set(later))
    artifacts = [e for e in after[1:] if e.HasField("artifact_update")]
    assert len(artifacts) + len(snapshot.artifacts) == 1
    assert after[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    done = await second.get_task(GetTaskRequest(id=task_id))
    agent_ids = [m.message_id for m in done.history if m.role == Role.ROLE_AGENT]
    # Together: every message of the task, in order, exactly once.
    assert agent_ids == in_snapshot + later
    assert len(agent_ids) == 4 and answer(done) == "done after 3 parts."


async def test_push_notification_for_completion_is_signed(
    a2a_replicas: list[Server], https: list[httpx.AsyncClient]
) -> None:
    """The receiver gets what A2A's own sender sends: the token header and the task as a
    StreamResponse (parsed with the SDK's types), signed too; a second task of the same
    context does not notify the first task's config."""
    receiver = Receiver()
    token = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    client = await client_of(https[0], a2a_replicas[0].base_url, streaming=False, polling=True)
    with serve(receiver) as rx_url:
        [reply] = [r async for r in client.send_message(message("[sleep:1000] push me"))]
        task_id, context_id = reply.task.id, reply.task.context_id
        config = TaskPushNotificationConfig(task_id=task_id, url=rx_url + "/a2a-hook", token=token)
        other = await client_of(https[1], a2a_replicas[1].base_url, streaming=False)
        made = await other.create_task_push_notification_config(config)
        assert made.id and made.task_id == task_id
        for _ in range(300):  # 30 s at most
            if receiver.snapshot():
                break
            await asyncio.sleep(0.1)
        # A second task of the same context: none of the first task's config's news.
        [second] = [r async for r in other.send_message(message("again", context_id=context_id))]
        assert second.task.id != task_id
        assert second.task.status.state == TaskState.TASK_STATE_COMPLETED
        await asyncio.sleep(1.5)  # room for a second (invented) delivery to show up
        received = receiver.snapshot()
    assert len(received) == 1, received
    got = received[0]
    assert got.headers["x-a2a-notification-token"] == token
    Webhook(token).verify(got.body, got.headers)  # raises if forged
    pushed = json_format.Parse(got.body, StreamResponse())  # the SDK's own message
    assert pushed.WhichOneof("payload") == "task"
    assert pushed.task.id == task_id and pushed.task.context_id == context_id
    assert pushed.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer(pushed.task) == "echo: push me"
    done = await client.get_task(GetTaskRequest(id=task_id))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED


async def test_an_approval_is_input_required_until_the_next_message(
    a2a_replicas: list[Server], https: list[httpx.AsyncClient]
) -> None:
    agent = {"tools": ["echo"], "approval_required": ["echo"]}
    sid = (await https[0].post("/v1/sessions", json={"agent": agent})).json()["session_id"]
    client = await client_of(https[0], a2a_replicas[0].base_url, streaming=False)
    ask = message('[tool:echo {"text": "hi"}]', context_id=sid)
    [reply] = [r async for r in client.send_message(ask)]
    task = reply.task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    other = await client_of(https[1], a2a_replicas[1].base_url, streaming=True)
    events = [
        e
        async for e in other.send_message(
            message(data={"approve": True}, task_id=task.id, context_id=sid)
        )
    ]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    done = await client.get_task(GetTaskRequest(id=task.id))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer(done) == "echo returned: hi"


async def test_bad_calls_get_a2a_error_codes(https: list[httpx.AsyncClient]) -> None:
    http = https[1]
    headers = {"A2A-Version": "1.0"}

    async def code(**kwargs: object) -> int:
        reply = await http.post("/a2a", headers=headers, **kwargs)  # type: ignore[arg-type]
        assert reply.status_code == 200, reply.text
        return int(reply.json()["error"]["code"])

    rpc = {"jsonrpc": "2.0", "id": 7}
    assert await code(content=b"{nope") == -32700
    assert await code(json={"id": 7, "method": "GetTask"}) == -32600
    assert await code(json={**rpc, "method": "NoSuchMethod", "params": {}}) == -32601
    assert await code(json={**rpc, "method": "GetTask", "params": {"id": "run_none"}}) == -32001
    cancel = {**rpc, "method": "CancelTask", "params": {"id": "run_none"}}
    assert await code(json=cancel) == -32001
    bad_params = {**rpc, "method": "GetTask", "params": {"id": 5, "historyLength": "x"}}
    assert await code(json=bad_params) == -32602


async def test_the_example_client_runs(a2a_replicas: list[Server], tenant: TenantKey) -> None:
    """docs/how-to/a2a.md's runnable example, as a user runs it."""
    env = {**os.environ, "ASR_URL": a2a_replicas[0].base_url, "ASR_KEY": tenant.key}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / "python" / "a2a_client.py"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 120)
    text = output.decode()
    assert process.returncode == 0, text
    assert "echo: hello" in text and "artifact: word1 word2 word3 word4 word5" in text
    assert "history of run_" in text
