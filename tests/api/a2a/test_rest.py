"""A2A's HTTP+JSON binding, in process, with the official client (`a2a-sdk`) told to speak
it: the card announces it after JSON-RPC, and it answers the same methods."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import A2AError

from app.main import create_app
from app.settings import Settings
from tests.conftest import TenantKey

BASE = "http://asr.test"


def text(words: str, **ids: str) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=words)])
    for key, value in ids.items():
        setattr(message, key, value)
    return SendMessageRequest(message=message)


@pytest.fixture(scope="module")
async def rest_app(settings: Settings) -> AsyncIterator[object]:
    application = create_app(settings.model_copy(update={"webhook_allow_networks": "127.0.0.1/32"}))
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def http(rest_app: object, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=rest_app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(
        transport=transport, base_url=BASE, headers=tenant.headers, timeout=30
    ) as c:
        yield c


async def rest_client(http: httpx.AsyncClient, *, streaming: bool, url: str = BASE) -> Client:
    config = ClientConfig(
        httpx_client=http,
        streaming=streaming,
        supported_protocol_bindings=[TransportProtocol.HTTP_JSON.value],
    )
    return await create_client(url, config)


async def test_the_card_announces_http_json_after_json_rpc(http: httpx.AsyncClient) -> None:
    card = (await http.get("/.well-known/agent-card.json")).json()
    bindings = [(i["protocolBinding"], i["url"]) for i in card["supportedInterfaces"]]
    assert bindings[0] == ("JSONRPC", f"{BASE}/a2a")
    assert bindings[-1] == ("HTTP+JSON", f"{BASE}/a2a/rest")
    # A blueprint's binding is under its base URL: an unknown one is a problem, not a 500.
    unknown = await http.get("/a2a/nope/rest/tasks")
    assert unknown.status_code == 422, unknown.text


async def test_send_get_list_stream_and_push_configs_over_http_json(
    http: httpx.AsyncClient,
) -> None:
    client = await rest_client(http, streaming=False)
    [reply] = [r async for r in client.send_message(text("hello"))]
    task = reply.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert "".join(p.text for a in task.artifacts for p in a.parts) == "echo: hello"
    got = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
    assert got.id == task.id and len(got.history) == 1
    listed = await client.list_tasks(ListTasksRequest(context_id=task.context_id))
    assert [t.id for t in listed.tasks] == [task.id]
    with pytest.raises(A2AError):
        await client.get_task(GetTaskRequest(id="run_nope"))
    with pytest.raises(A2AError):
        await client.cancel_task(CancelTaskRequest(id=task.id))  # not working

    config = TaskPushNotificationConfig(task_id=task.id, url="http://127.0.0.1:9/a2a", token="t1")
    made = await client.create_task_push_notification_config(config)
    assert made.id.startswith("wh_") and made.token == "t1"
    read = await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task.id, id=made.id)
    )
    assert read.url == config.url
    configs = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert [c.id for c in configs.configs] == [made.id]
    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=made.id)
    )
    card = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    assert any(s.id == "chat" for s in card.skills)

    streaming = await rest_client(http, streaming=True)
    events = [e async for e in streaming.send_message(text("[words:3]"))]
    assert events[0].HasField("task")
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_http_json_errors_are_a2a_s_and_never_a_500(http: httpx.AsyncClient) -> None:
    unknown = await http.get("/a2a/rest/tasks/run_nope")
    bad = await http.post("/a2a/rest/message:send", content=b"{not json")
    empty = await http.post("/a2a/rest/message:send", json={"message": {"role": "ROLE_USER"}})
    assert (unknown.status_code, bad.status_code, empty.status_code) == (404, 400, 400), (
        unknown.text,
        bad.text,
        empty.text,
    )


async def test_http_json_refuses_a_body_that_is_not_utf8_as_malformed(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="a2a"):
        for body in (b'{"message": {"role": "\xb5"}}', b"\xb5"):
            bad = await http.post("/a2a/rest/message:send", content=body)
            assert bad.status_code == 400, bad.text
            assert bad.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_http_json_needs_a_key(rest_app: object) -> None:
    transport = httpx.ASGITransport(app=rest_app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as anon:
        refused = await anon.get("/a2a/rest/tasks")
    assert refused.status_code == 401
    assert refused.headers["content-type"].startswith("application/problem+json")
