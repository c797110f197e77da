"""A2A push notification configs as webhook subscriptions of the `a2a` format: the
transactional outbox delivers them (signed, retried, none lost, none invented), so no second
delivery path exists, and what a receiver gets is what A2A's own senders send.

A config of task T is a webhook on T's session for RUN_FINISHED, described `a2a-push:T`,
whose `format_options` name T, the client's `token` and the `authentication` it asked for:
its id is the config's id, and it lives and is listed like any other webhook of the tenant.
Each delivery is rendered at delivery time by `PushRenderer`:

- only the ends of T's own runs are sent (T's first run and the runs that continue it): its
  terminal state, or INPUT_REQUIRED when it waits for an approval, a client tool or an
  answer; another task of the same context (session) is none of the config's news, and its
  delivery is dropped unsent;
- the body is the SDK's: `MessageToDict(StreamResponse(task=...))`, the task as the ledger
  held it at that end (the same body on every retry);
- the headers are the SDK's: `X-A2A-Notification-Token: <token>` when the config has a
  token, `Authorization: <scheme> <credentials>` when it has both; plus the Standard Webhooks
  `webhook-id` (the event id: the same on every retry, for deduplication),
  `webhook-timestamp` and `webhook-signature`.

The signing secret is derived from the token: a `whsec_…` token is the secret itself; any
other token `t` gives `whsec_` + base64(SHA-256(t)), so the receiver, who chose the token,
can check every signature. A config without a token gets a fresh secret nobody is shown
(its deliveries are signed all the same). The token and the credentials are kept only in
the subscription's `format_options`: no event, log or webhook route shows them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from a2a.types.a2a_pb2 import StreamResponse, TaskPushNotificationConfig
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict

from app.api.a2a.tasks import RunTaskStore
from app.runtime.errors import WebhookNotFound
from app.runtime.runs.manager import RunManager
from app.runtime.session.events import Event, EventType
from app.runtime.session.service import SessionRuntime
from app.runtime.webhooks.delivery import Rendered, Renderer
from app.runtime.webhooks.records import WebhookRecord
from app.runtime.webhooks.service import Webhooks
from app.runtime.webhooks.signing import SECRET_PREFIX

FORMAT = "a2a"
PREFIX = "a2a-push:"
EVENT_TYPES = [EventType.RUN_FINISHED.value]
MAX_LISTED = 100
TOKEN_HEADER = "X-A2A-Notification-Token"


def secret_of(token: str) -> str | None:
    """The signing secret a config's token stands for (see the module doc)."""
    if not token:
        return None
    if token.startswith(SECRET_PREFIX):
        try:
            if len(base64.b64decode(token.removeprefix(SECRET_PREFIX), validate=True)) >= 24:
                return token
        except (binascii.Error, ValueError):
            pass
    return SECRET_PREFIX + base64.b64encode(hashlib.sha256(token.encode()).digest()).decode()


def options_of(config: TaskPushNotificationConfig, task_id: str) -> dict[str, Any]:
    """What the `a2a` format keeps of a config: its task, token and authentication."""
    options: dict[str, Any] = {"task_id": task_id}
    if config.token:
        options["token"] = config.token
    if config.HasField("authentication") and config.authentication.scheme:
        auth = config.authentication
        options["authentication"] = {"scheme": auth.scheme, "credentials": auth.credentials}
    return options


def config_of(webhook: WebhookRecord, task_id: str) -> TaskPushNotificationConfig:
    """The config as A2A reads it back: its token, and its authentication's scheme (the
    credentials are the receiver's secret, sent to it only)."""
    options = webhook.format_options or {}
    config = TaskPushNotificationConfig(
        id=webhook.webhook_id,
        task_id=task_id,
        url=webhook.url,
        token=str(options.get("token") or ""),
    )
    auth = options.get("authentication")
    if isinstance(auth, dict) and auth.get("scheme"):
        config.authentication.scheme = str(auth["scheme"])
    return config


def headers_of(options: Mapping[str, Any]) -> dict[str, str]:
    """The headers A2A's sender adds for a config (`BasePushNotificationSender`)."""
    headers: dict[str, str] = {}
    if options.get("token"):
        headers[TOKEN_HEADER] = str(options["token"])
    auth = options.get("authentication")
    if isinstance(auth, dict) and auth.get("scheme") and auth.get("credentials"):
        headers["Authorization"] = f"{auth['scheme']} {auth['credentials']}"
    return headers


class PushConfigs:
    """Create, read, list and delete the push configs of a task (its webhooks)."""

    def __init__(self, webhooks: Webhooks) -> None:
        self.webhooks = webhooks

    async def create(
        self, tenant_id: str, session_id: str, config: TaskPushNotificationConfig
    ) -> TaskPushNotificationConfig:
        if not config.url:
            raise InvalidParamsError(message="a push notification config needs a url")
        webhook = await self.webhooks.create(
            tenant_id,
            url=config.url,
            event_types=EVENT_TYPES,
            session_id=session_id,
            description=PREFIX + config.task_id,
            secret=secret_of(config.token),
            format=FORMAT,
            format_options=options_of(config, config.task_id),
        )
        return config_of(webhook, config.task_id)

    async def retarget(self, tenant_id: str, config_id: str, task_id: str) -> None:
        """Name another task (a message's own config, when its run turned out to be a
        replayed one)."""
        webhook = await self.webhooks.get(tenant_id, config_id)
        options = {**(webhook.format_options or {}), "task_id": task_id}
        await self.webhooks.update(
            tenant_id, config_id, {"description": PREFIX + task_id, "format_options": options}
        )

    async def list(self, tenant_id: str, task_id: str) -> list[TaskPushNotificationConfig]:
        found = await self.webhooks.list(tenant_id, limit=MAX_LISTED)
        return [config_of(w, task_id) for w in found if w.description == PREFIX + task_id]

    async def get(self, tenant_id: str, task_id: str, config_id: str) -> TaskPushNotificationConfig:
        webhook = await self._owned(tenant_id, task_id, config_id)
        if webhook is None:
            raise InvalidParamsError(message=f"task {task_id} has no push config {config_id}")
        return config_of(webhook, task_id)

    async def delete(self, tenant_id: str, task_id: str, config_id: str) -> None:
        if await self._owned(tenant_id, task_id, config_id) is not None:
            await self.webhooks.delete(tenant_id, config_id)

    async def _owned(self, tenant_id: str, task_id: str, config_id: str) -> WebhookRecord | None:
        try:
            webhook = await self.webhooks.get(tenant_id, config_id)
        except WebhookNotFound:
            return None
        return webhook if webhook.description == PREFIX + task_id else None


class PushRenderer:
    """The `a2a` format's `Renderer`: a delivery of a config of task T is T's
    StreamResponse at the end of one of T's runs, or None (dropped) for anything else."""

    def __init__(self, tasks: RunTaskStore) -> None:
        self.tasks = tasks

    async def __call__(self, webhook: WebhookRecord, event: Event) -> Rendered | None:
        options = webhook.format_options or {}
        task_id = str(options.get("task_id") or "")
        if event.type != EventType.RUN_FINISHED.value or not task_id or event.run_id is None:
            return None
        found = await self.tasks.find(webhook.tenant_id, task_id)
        if found is None or event.run_id not in {run.run_id for run in found.runs}:
            return None  # another task's end (or the task is gone)
        fold = await self.tasks.fold(webhook.tenant_id, found, before_seq=event.seq + 1)
        body = json.dumps(
            MessageToDict(StreamResponse(task=fold.task())),
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
        return Rendered(body, headers_of(options))


def renderers(runtime: SessionRuntime, runs: RunManager) -> dict[str, Renderer]:
    """The delivery formats the A2A API adds to the deliverer (given at assembly)."""
    return {FORMAT: PushRenderer(RunTaskStore(runtime, runs))}
