"""A2A push notification configs as webhook subscriptions: the transactional outbox delivers
them (signed, retried, none lost), so no second delivery path exists.

A config of task T is a webhook on T's session for RUN_FINISHED, described `a2a-push:T`: its
id is the config's id, and it lives and is listed like any other webhook of the tenant. The
delivery is the webhook's (Standard Webhooks: `webhook-id`, `webhook-timestamp`,
`webhook-signature`; the body's `data.run_id` names the run that ended, and `data.payload`
its status and stop reason). Its signing secret is the config's `token`: a `whsec_…` token is
the secret itself; any other token `t` gives the secret `whsec_` + base64(SHA-256(t)), so the
receiver, who chose the token, can check every signature. A config without a token gets a
fresh secret nobody is shown (its deliveries are signed all the same).
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from a2a.types.a2a_pb2 import TaskPushNotificationConfig
from a2a.utils.errors import InvalidParamsError

from app.runtime.errors import WebhookNotFound
from app.runtime.webhooks.records import WebhookRecord
from app.runtime.webhooks.service import Webhooks
from app.runtime.webhooks.signing import SECRET_PREFIX

PREFIX = "a2a-push:"
EVENT_TYPES = ["RUN_FINISHED"]
MAX_LISTED = 100


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


def config_of(
    webhook: WebhookRecord, task_id: str, *, token: str = ""
) -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(
        id=webhook.webhook_id, task_id=task_id, url=webhook.url, token=token
    )


class PushConfigs:
    """Create, read, list and delete the push configs of a task (its webhooks)."""

    def __init__(self, webhooks: Webhooks) -> None:
        self.webhooks = webhooks

    async def create(
        self, tenant_id: str, session_id: str, config: TaskPushNotificationConfig
    ) -> TaskPushNotificationConfig:
        if not config.url:
            raise InvalidParamsError(message="a push notification config needs a url")
        if config.HasField("authentication") and config.authentication.scheme:
            # The outbox signs deliveries; it sends no credentials of the receiver's own.
            raise InvalidParamsError(
                message="authentication is not supported: deliveries are signed with the token"
            )
        webhook = await self.webhooks.create(
            tenant_id,
            url=config.url,
            event_types=EVENT_TYPES,
            session_id=session_id,
            description=PREFIX + config.task_id,
            secret=secret_of(config.token),
        )
        return config_of(webhook, config.task_id, token=config.token)

    async def retarget(self, tenant_id: str, config_id: str, task_id: str) -> None:
        """Name the task of a config made before its task's run existed (SendMessage's)."""
        await self.webhooks.update(tenant_id, config_id, {"description": PREFIX + task_id})

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
