"""A2A push notifications in A2A's own format, in process: a deliverer driven by hand
(`run_once`) with the A2A renderer sends a config's task, as the SDK's sender would, for the
ends of that task's runs only."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from google.protobuf import json_format
from standardwebhooks.webhooks import Webhook

from app.api.a2a.push import renderers, secret_of
from app.main import create_app
from app.runtime.webhooks.delivery import Deliverer, DeliveryPolicy
from app.runtime.webhooks.targets import TargetPolicy, parse_networks
from app.services import services_of
from app.settings import Settings
from tests.conftest import TenantKey
from tests.loopback import serve
from tests.webhook_receiver import Receiver

BASE = "http://asr.test"
ALLOW = "127.0.0.1/32"


def text(words: str, **ids: str) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=words)])
    for key, value in ids.items():
        setattr(message, key, value)
    return SendMessageRequest(message=message)


@pytest.fixture(scope="module")
async def push_app(settings: Settings) -> AsyncIterator[object]:
    application = create_app(settings.model_copy(update={"webhook_allow_networks": ALLOW}))
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def http(push_app: object, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=push_app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(
        transport=transport, base_url=BASE, headers=tenant.headers, timeout=30
    ) as c:
        yield c


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    rx = Receiver()
    with serve(rx) as url:
        yield rx, url


def a2a_deliverer(app: object) -> Deliverer:
    services = services_of(app)  # type: ignore[arg-type]
    return Deliverer(
        services.stores.webhooks,
        owner=f"test-{uuid.uuid4().hex[:6]}",
        targets=TargetPolicy(parse_networks(ALLOW)),
        policy=DeliveryPolicy(timeout_seconds=5.0),
        renderers=renderers(services.runtime, services.runs),
    )


async def drain(d: Deliverer, rx: Receiver, want: int, *, rounds: int = 150) -> None:
    for _ in range(rounds):
        await d.run_once()
        if len(rx.snapshot()) >= want:
            break
        await asyncio.sleep(0.02)
    for _ in range(10):  # room for an invented delivery to show up
        await d.run_once()
        await asyncio.sleep(0.02)


async def test_a_config_gets_its_task_in_a2a_format_and_nothing_of_other_tasks(
    push_app: object, http: httpx.AsyncClient, receiver: tuple[Receiver, str]
) -> None:
    rx, url = receiver
    client = await create_client(BASE, ClientConfig(httpx_client=http, streaming=False))
    ask = text("[ask] help me")
    push = ask.configuration.task_push_notification_config
    push.url, push.token = url + "/a2a-hook", "tok-1"
    push.authentication.scheme, push.authentication.credentials = "Bearer", "cred-1"
    [asked] = [r async for r in client.send_message(ask)]
    task = asked.task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    # The task's continuation (its next message) ends it; then a second task of the same
    # context ends too, which is none of the config's news.
    [done] = [
        r
        async for r in client.send_message(
            text("with the garden", task_id=task.id, context_id=task.context_id)
        )
    ]
    assert done.task.status.state == TaskState.TASK_STATE_COMPLETED
    [other] = [r async for r in client.send_message(text("hi", context_id=task.context_id))]
    assert other.task.id != task.id

    d = a2a_deliverer(push_app)
    try:
        await drain(d, rx, 2)
    finally:
        await d.stop(grace_seconds=1)
    received = rx.snapshot()
    assert [r.path for r in received] == ["/a2a-hook", "/a2a-hook"], received
    states = []
    for r in received:
        assert r.headers["x-a2a-notification-token"] == "tok-1"
        assert r.headers["authorization"] == "Bearer cred-1"
        Webhook(secret_of("tok-1")).verify(r.body, r.headers)  # signed too; raises if forged
        parsed = json_format.Parse(r.body, StreamResponse())  # the SDK's own message
        assert parsed.WhichOneof("payload") == "task"
        assert parsed.task.id == task.id and parsed.task.context_id == task.context_id
        states.append(parsed.task.status.state)
    assert states == [TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_COMPLETED]
    last = json_format.Parse(received[-1].body, StreamResponse()).task
    assert "".join(p.text for a in last.artifacts for p in a.parts)
    # The config's delivery log holds only what was sent: the other task's end was dropped.
    [config] = (
        await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
    ).configs
    assert config.token == "tok-1" and config.authentication.scheme == "Bearer"
    assert not config.authentication.credentials
    log = (await http.get(f"/v1/webhooks/{config.id}/deliveries")).json()["data"]
    assert sorted(d["status"] for d in log) == ["delivered", "delivered"], log
    hook = (await http.get(f"/v1/webhooks/{config.id}")).json()
    assert "tok-1" not in str(hook) and "cred-1" not in str(hook)


async def test_a_replica_without_the_renderer_sends_nothing_and_retries(
    push_app: object, http: httpx.AsyncClient, receiver: tuple[Receiver, str]
) -> None:
    """A deliverer that does not know the `a2a` format (an older replica mid-deploy) sends
    no envelope of its own in its place: the delivery stays pending for one that does."""
    rx, url = receiver
    client = await create_client(BASE, ClientConfig(httpx_client=http, streaming=False))
    request = text("hi")
    push = request.configuration.task_push_notification_config
    push.url, push.token = url + "/a2a-hook", "tok-2"
    [reply] = [r async for r in client.send_message(request)]
    [config] = (
        await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=reply.task.id)
        )
    ).configs
    services = services_of(push_app)  # type: ignore[arg-type]
    older = Deliverer(
        services.stores.webhooks,
        owner=f"test-{uuid.uuid4().hex[:6]}",
        targets=TargetPolicy(parse_networks(ALLOW)),
        policy=DeliveryPolicy(timeout_seconds=5.0),
    )
    try:
        for _ in range(50):
            await older.run_once()
            log = (await http.get(f"/v1/webhooks/{config.id}/deliveries")).json()["data"]
            if log and log[0]["attempts"]:
                break
            await asyncio.sleep(0.02)
    finally:
        await older.stop(grace_seconds=1)
    [delivery] = log
    assert delivery["status"] == "pending" and "no renderer" in delivery["last_error"]
    assert rx.snapshot() == []
    # A replica that knows the format sends it (redelivered now, not after the backoff).
    await http.post(f"/v1/webhooks/{config.id}/deliveries/{delivery['delivery_id']}/redeliver")
    d = a2a_deliverer(push_app)
    try:
        await drain(d, rx, 1)
    finally:
        await d.stop(grace_seconds=1)
    [got] = rx.snapshot()
    assert json_format.Parse(got.body, StreamResponse()).task.id == reply.task.id
