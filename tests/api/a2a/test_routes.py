"""A2A over sessions and runs, in process, with the official client (`a2a-sdk`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client
from a2a.types.a2a_pb2 import (
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
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import A2AError
from google.protobuf.struct_pb2 import Value

from app.main import create_app
from app.settings import Settings
from tests.conftest import TenantKey

BASE = "http://asr.test"


def text(words: str, **ids: str) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=words)])
    for key, value in ids.items():
        setattr(message, key, value)
    return SendMessageRequest(message=message)


def data(payload: dict, **ids: str) -> SendMessageRequest:
    value = Value()
    value.struct_value.update(payload)
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(data=value)])
    for key, v in ids.items():
        setattr(message, key, v)
    return SendMessageRequest(message=message)


async def responses(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [r async for r in client.send_message(request)]


def answer(task: Task) -> str:
    return "".join(p.text for a in task.artifacts for p in a.parts)


@pytest.fixture
async def http(app: object, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(
        transport=transport, base_url=BASE, headers=tenant.headers, timeout=30
    ) as c:
        yield c


async def make_client(http: httpx.AsyncClient, *, streaming: bool, url: str = BASE) -> Client:
    return await create_client(url, ClientConfig(httpx_client=http, streaming=streaming))


async def test_the_card_is_public_and_names_the_endpoint(anon: httpx.AsyncClient) -> None:
    card = (await anon.get("/.well-known/agent-card.json")).json()
    assert card["supportedInterfaces"][0]["url"] == f"{BASE}/a2a"
    assert card["capabilities"]["streaming"] and card["capabilities"]["pushNotifications"]
    assert "bearer" in card["securitySchemes"]
    refused = await anon.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"})
    assert refused.status_code == 401


async def test_send_get_and_list(http: httpx.AsyncClient) -> None:
    client = await make_client(http, streaming=False)
    [reply] = await responses(client, text("hello"))
    task = reply.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer(task) == "echo: hello"
    got = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
    assert got.status.state == TaskState.TASK_STATE_COMPLETED and len(got.history) == 1
    full = await client.get_task(GetTaskRequest(id=task.id))
    assert [m.role for m in full.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
    # The same context: a second task in the same session.
    [again] = await responses(client, text("[words:3]", context_id=task.context_id))
    assert answer(again.task) == "word1 word2 word3"
    listed = await client.list_tasks(ListTasksRequest(context_id=task.context_id))
    assert [t.id for t in listed.tasks] == [again.task.id, task.id]


async def test_stream(http: httpx.AsyncClient) -> None:
    client = await make_client(http, streaming=True)
    events = await responses(client, text("[words:4]"))
    assert events[0].HasField("task")
    kinds = [e.WhichOneof("payload") for e in events]
    assert "artifact_update" in kinds
    last = events[-1].status_update
    assert last.status.state == TaskState.TASK_STATE_COMPLETED


async def test_approval_goes_input_required_then_completes(http: httpx.AsyncClient) -> None:
    session = await http.post(
        "/v1/sessions", json={"agent": {"tools": ["echo"], "approval_required": ["echo"]}}
    )
    sid = session.json()["session_id"]
    client = await make_client(http, streaming=False)
    [reply] = await responses(client, text('[tool:echo {"text": "x"}]', context_id=sid))
    task = reply.task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert task.context_id == sid
    [done] = await responses(client, data({"approve": True}, task_id=task.id, context_id=sid))
    assert done.task.id == task.id
    assert done.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer(done.task) == "echo returned: x"


async def test_errors_are_a2a_codes(http: httpx.AsyncClient) -> None:
    headers = {"A2A-Version": "1.0"}
    bad = await http.post("/a2a", content=b"{not json", headers=headers)
    assert bad.status_code == 200 and bad.json()["error"]["code"] == -32700
    invalid = await http.post("/a2a", json={"id": 1, "method": "GetTask"}, headers=headers)
    assert invalid.json()["error"]["code"] == -32600
    not_a_name = await http.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": {}})
    assert not_a_name.json()["error"]["code"] == -32600
    unknown = await http.post(
        "/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "Nope", "params": {}}, headers=headers
    )
    assert unknown.json()["error"]["code"] == -32601
    missing = await http.post(
        "/a2a",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "run_nope"}},
        headers=headers,
    )
    assert missing.json()["error"]["code"] == -32001
    client = await make_client(http, streaming=False)
    with pytest.raises(A2AError):
        await client.get_task(GetTaskRequest(id="run_nope"))


def rpc(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": 9, "method": method, "params": params}


async def test_versions_cards_lists_and_refusals(http: httpx.AsyncClient) -> None:
    # No A2A-Version: 1.0's method names are 1.0, 0.3's are 0.3.
    send = {
        "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "a"}]}
    }
    done = (await http.post("/a2a", json=rpc("SendMessage", send))).json()["result"]["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    old = {"id": done["id"]}
    assert (await http.post("/a2a", json=rpc("tasks/get", old))).json()["result"]["status"][
        "state"
    ] == "completed"
    client = await make_client(http, streaming=True)
    # A finished task cannot be cancelled, nor subscribed to.
    cancel = await http.post("/a2a", json=rpc("CancelTask", {"id": done["id"]}))
    assert cancel.json()["error"]["code"] == -32002
    subscribe = await http.post("/a2a", json=rpc("SubscribeToTask", {"id": done["id"]}))
    assert '"code": -32004' in subscribe.text or '"code":-32004' in subscribe.text
    # Listed among the contexts A2A created.
    listed = await client.list_tasks(ListTasksRequest(page_size=100))
    assert done["id"] in [t.id for t in listed.tasks]
    card = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    assert any(s.id == "chat" for s in card.skills)


@pytest.fixture
async def loopback_hooks(settings: Settings, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    """An app whose webhooks may target loopback (no deliverer runs in it)."""
    application = create_app(settings.model_copy(update={"webhook_allow_networks": "127.0.0.1/32"}))
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(
            transport=transport, base_url=BASE, headers=tenant.headers, timeout=30
        ) as c:
            yield c


async def test_push_configs_are_webhooks(loopback_hooks: httpx.AsyncClient) -> None:
    http = loopback_hooks
    client = await make_client(http, streaming=False)
    [reply] = await responses(client, text("hi"))
    task_id = reply.task.id
    config = TaskPushNotificationConfig(
        task_id=task_id, url="http://127.0.0.1:9/a2a", token="my-token"
    )
    made = await client.create_task_push_notification_config(config)
    assert made.id.startswith("wh_") and made.token == "my-token"
    got = await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task_id, id=made.id)
    )
    assert got.url == config.url and got.token == "my-token"
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id)
    )
    assert [c.id for c in listed.configs] == [made.id]
    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=made.id)
    )
    webhooks = (await http.get("/v1/webhooks")).json()["data"]
    assert made.id not in [w["webhook_id"] for w in webhooks]


async def test_a_push_config_on_send_is_made_before_the_run(
    loopback_hooks: httpx.AsyncClient,
) -> None:
    client = await make_client(loopback_hooks, streaming=False)
    request = text("hi")
    push = request.configuration.task_push_notification_config
    push.url, push.token = "http://127.0.0.1:9/a2a", "t"
    [reply] = await responses(client, request)
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=reply.task.id)
    )
    assert len(listed.configs) == 1 and listed.configs[0].task_id == reply.task.id
    hooks = (await loopback_hooks.get("/v1/webhooks")).json()["data"]
    [hook] = [w for w in hooks if w["webhook_id"] == listed.configs[0].id]
    assert hook["session_id"] == reply.task.context_id and hook["event_types"] == ["RUN_FINISHED"]


async def test_a_question_is_answered_by_the_next_message(http: httpx.AsyncClient) -> None:
    client = await make_client(http, streaming=False)
    [asked] = await responses(client, text("[ask] help me"))
    task = asked.task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    reply = text("with the garden", task_id=task.id, context_id=task.context_id)
    [done] = await responses(client, reply)
    assert done.task.id == task.id
    assert done.task.status.state == TaskState.TASK_STATE_COMPLETED
    users = [m for m in done.task.history if m.role == Role.ROLE_USER]
    assert [m.message_id for m in users] == [
        asked.task.history[0].message_id,
        reply.message.message_id,
    ]


async def test_a_callers_malformed_request_leaves_no_traceback_in_the_log(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The caller gets -32600/-32602; a traceback in our log would claim a fault of ours."""
    headers = {"A2A-Version": "1.0"}
    with caplog.at_level(logging.INFO, logger="a2a"):
        extra = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}, "bogus": 1}
        answered = await http.post("/a2a", json=extra, headers=headers)
        assert answered.json()["error"]["code"] == -32600
        params = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": {"x": 1}}}
        answered = await http.post("/a2a", json=params, headers=headers)
        assert answered.json()["error"]["code"] == -32602
    dispatcher = [r for r in caplog.records if r.name.startswith("a2a.server.routes")]
    assert dispatcher and all(r.exc_info is None for r in dispatcher)


async def test_a_body_that_is_not_utf8_is_a_parse_error(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """JSON text is UTF-8: other bytes are malformed JSON (-32700), as the SDK answers any
    other, not its own fault (-32603, with a traceback in the log)."""
    with caplog.at_level(logging.INFO, logger="a2a"):
        for body in (b'{"jsonrpc": "2.0", "id": 1, "method": "\xb5"}', b"\xb5", b"\xff\xfe"):
            bad = await http.post("/a2a", content=body, headers={"A2A-Version": "1.0"})
            assert bad.status_code == 200, bad.text
            assert bad.json()["error"]["code"] == -32700
            assert bad.json()["id"] is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
