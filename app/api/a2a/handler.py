"""The SDK's `RequestHandler` over our run service: every A2A method is a translation.

- SendMessage / SendStreamingMessage: a message without `taskId` starts a run (a new task)
  in its context's session; with the `taskId` of a task waiting for input it answers the
  wait (`replies`) and starts the run that continues the task, in one transaction. The
  run start's idempotency key is derived from the context (or task) and the `messageId`,
  so a retried message never starts a second run.
- GetTask, ListTasks: read from the runs and the ledger (`RunTaskStore`).
- CancelTask: the REST cancel, which reaches the run on whichever replica executes it.
- SubscribeToTask: the task as the ledger has it, then its run's events from the bus
  (`RunFollow`), each event exactly once.
- Push notification configs: webhooks (`PushConfigs`).

One handler per request: it carries the caller's tenant and the agent the route names.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event as A2aEvent
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from app.api.a2a.cards import CardMaker
from app.api.a2a.contexts import open_context, session_id_of
from app.api.a2a.fold import TERMINAL, TaskFold, finished_state
from app.api.a2a.push import PushConfigs
from app.api.a2a.replies import Reply, decisions, read_message, run_input, tool_outputs
from app.api.a2a.tasks import RunTaskStore, TaskRuns
from app.live.run_follow import RunFollow
from app.live.timeline import StreamEnd
from app.runtime.errors import (
    AgentSessionError,
    IdempotentReplay,
    InvalidRequest,
    NotFound,
    RunAlreadyActive,
    ToolCallsPending,
)
from app.runtime.ports import IdempotencyToken, RunRecord
from app.runtime.runs.answers import answer_events, approval_events
from app.runtime.runs.manager import LIVE_STATUSES
from app.runtime.runs.plan import RunRequest
from app.runtime.session import event_payloads as ev
from app.runtime.session.events import NewEvent
from app.runtime.session.service import Loaded
from app.services import Services


def run_token(scope: str, message_id: str) -> IdempotencyToken:
    """The run start's idempotency key: one run per message of a context (or task)."""
    digest = hashlib.sha256(f"{scope}\0{message_id}".encode()).hexdigest()
    return IdempotencyToken(key=f"a2a:{digest[:48]}", request_hash=digest)


def domain_error(exc: AgentSessionError) -> A2AError:
    """A domain error as the A2A error a client can act on (never an internal error)."""
    if isinstance(exc, NotFound):
        return TaskNotFoundError(message=str(exc) or exc.code)
    return InvalidParamsError(message=f"{exc.code}: {exc}")


def _waiting(loaded: Loaded, kind: str) -> list[str]:
    return [
        cid
        for cid, c in loaded.state.pending.items()
        if c.get("kind") == kind and c.get("decision") is None
    ]


class A2aHandler(RequestHandler):
    """A2A methods for one caller (tenant) and one agent (blueprint, or the default)."""

    def __init__(
        self,
        services: Services,
        *,
        tenant_id: str,
        agent_name: str | None,
        cards: CardMaker,
    ) -> None:
        self.services = services
        self.tenant_id = tenant_id
        self.agent_name = agent_name
        self.cards = cards
        self.tasks = RunTaskStore(services.runtime, services.runs)
        self.push = PushConfigs(services.webhooks)

    # ------------------------------------------------------------------ reading

    async def _found(self, task_id: str) -> TaskRuns:
        found = await self.tasks.find(self.tenant_id, task_id) if task_id else None
        if found is None:
            raise TaskNotFoundError(message=f"no task {task_id}")
        return found

    async def _task(self, task_id: str, history_length: int | None = None) -> Task:
        fold = await self.tasks.fold(self.tenant_id, await self._found(task_id))
        return fold.task(history_length=history_length)

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        if params.HasField("history_length") and params.history_length < 0:
            raise InvalidParamsError(message="historyLength must not be negative")
        history = params.history_length if params.HasField("history_length") else None
        return await self._task(params.id, history)

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        return await self.tasks.list(params, context)

    # ------------------------------------------------------------------ sending

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        task_id, run, _loaded = await self._send(params)
        config = params.configuration
        if not config.return_immediately:
            settings = self.services.settings
            await self.services.runs.wait(
                self.tenant_id, run.run_id, within_seconds=settings.run_wait_seconds
            )
        history = config.history_length if config.HasField("history_length") else None
        return await self._task(task_id, history)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[A2aEvent]:
        task_id, run, _loaded = await self._send(params)
        # Follow before anything else awaits, so no event of the run is missed.
        follow = self.services.run_streams.follow(self.tenant_id, run, deltas=False)
        async for event in self._stream(task_id, follow, fresh=True):
            yield event

    async def _send(self, params: SendMessageRequest) -> tuple[str, RunRecord, Loaded | None]:
        """Start the run the message asks for; returns the task id and the run."""
        message = params.message
        if not message.message_id:
            raise InvalidParamsError(message="message.messageId is required")
        reply = read_message(message)
        try:
            if message.task_id:
                return await self._continue(message, reply, params)
            return await self._begin(message, reply, params)
        except ToolCallsPending:
            raise InvalidParamsError(
                message="a task of this context waits for input: answer it with its taskId"
            ) from None
        except RunAlreadyActive:
            raise InvalidParamsError(
                message="a task of this context is working: wait for it, or cancel it"
            ) from None
        except AgentSessionError as exc:
            raise domain_error(exc) from None

    async def _begin(
        self, message: Message, reply: Reply, params: SendMessageRequest
    ) -> tuple[str, RunRecord, Loaded | None]:
        text = run_input(reply)
        services, tenant_id = self.services, self.tenant_id
        loaded = await open_context(
            services.runtime,
            tenant_id,
            message.context_id or None,
            blueprints=services.blueprints,
            agent_name=self.agent_name,
        )
        session_id = loaded.session.session_id
        token = run_token(session_id, message.message_id)
        replayed = await self._replayed(token)
        if replayed is not None:
            return replayed.run_id, replayed, None
        push = params.configuration.task_push_notification_config
        run_id = f"run_{uuid.uuid4().hex}"
        webhook = None
        if params.configuration.HasField("task_push_notification_config"):
            # Subscribed before the run starts, naming the run it will be, so no end of a
            # short run goes undelivered.
            pending = TaskPushNotificationConfig(url=push.url, token=push.token, task_id=run_id)
            pending.authentication.CopyFrom(push.authentication)
            webhook = await self.push.create(tenant_id, session_id, pending)
        request = RunRequest(input=text, input_id=message.message_id, run_id=run_id)
        try:
            run = await services.runs.start(tenant_id, session_id, request, idempotency=token)
        except IdempotentReplay:
            replayed = await self._replayed(token)
            if replayed is None:
                raise
            run = replayed
        except BaseException:
            if webhook is not None:
                await self.push.delete(tenant_id, run_id, webhook.id)
            raise
        if webhook is not None and run.run_id != run_id:  # a duplicate's run was replayed
            await self.push.retarget(tenant_id, webhook.id, run.run_id)
        return run.run_id, run, loaded

    async def _replayed(self, token: IdempotencyToken) -> RunRecord | None:
        found = await self.services.runtime.find_idempotent(self.tenant_id, token)
        if found is None:
            return None
        return await self.services.runs.get_run(self.tenant_id, found.result["run_id"])

    async def _continue(
        self, message: Message, reply: Reply, params: SendMessageRequest
    ) -> tuple[str, RunRecord, Loaded | None]:
        """Answer a task waiting for input and continue it (see `replies`)."""
        found = await self._found(message.task_id)
        session_id = found.session.session_id
        if message.context_id and session_id_of(message.context_id) != session_id:
            raise InvalidParamsError(message="the task belongs to another context")
        token = run_token(f"{session_id}\0{found.task_id}", message.message_id)
        replayed = await self._replayed(token)
        if replayed is not None:
            return found.task_id, replayed, None
        latest = found.latest
        if latest.status in LIVE_STATUSES:
            raise InvalidParamsError(message="the task is working: it takes no message now")
        state = finished_state(latest.status, latest.stop_reason)
        if state in TERMINAL:
            raise UnsupportedOperationError(message="the task is in a terminal state")
        runtime = self.services.runtime
        loaded = await runtime.load(self.tenant_id, session_id)
        self._answer(loaded, reply, message.message_id)  # refuse a reply that answers nothing

        def prefix(current: Loaded) -> list[NewEvent]:
            return self._answer(current, reply, message.message_id)

        run = await self.services.runs.start(
            self.tenant_id, session_id, RunRequest(), idempotency=token, prefix=prefix
        )
        return found.task_id, run, loaded

    def _answer(self, loaded: Loaded, reply: Reply, message_id: str) -> list[NewEvent]:
        """The events that answer what the task waits for, decided on `loaded`."""
        approvals = _waiting(loaded, "approval")
        answered = {
            i.get("call_id") for i in loaded.state.items if i.get("type") == "function_call_output"
        }
        clients = [c for c in _waiting(loaded, "client") if c not in answered]
        events: list[NewEvent] = []
        decided = decisions(reply, approvals)
        for call_id, (decision, reason) in decided.items():
            events += approval_events(loaded, call_id=call_id, decision=decision, reason=reason)
        outputs = tool_outputs(reply, clients)
        if outputs:
            events += answer_events(loaded, outputs, replace=False)
        left = [c for c in approvals if c not in decided] + [
            c for c in clients if c not in {o["call_id"] for o in outputs}
        ]
        if approvals or clients:
            if left:
                raise InvalidParamsError(
                    message="the task waits for: "
                    + ", ".join(left)
                    + ' (approve with {"approve": true} or the text "approve"; answer a '
                    'client tool with {"call_id": ..., "output": ...})',
                    data={"pending": left},
                )
            return events
        item: dict[str, Any] = {
            "type": "message",
            "role": "user",
            "content": run_input(reply),
            "id": message_id,
        }
        return [ev.MemoryItemsAppended(items=[item]).event()]

    # ---------------------------------------------------------------- streaming

    async def _stream(
        self, task_id: str, follow: RunFollow, *, fresh: bool = False
    ) -> AsyncGenerator[A2aEvent]:
        """The task as the ledger has it now, then each later event of its run once.

        `fresh` (a message's own stream): the task as it was before the run, submitted,
        then every event of the run, so the client sees the whole run unfold."""
        items = follow.items
        run = follow.run
        try:
            found = await self._found(task_id)
            before = (run.first_seq or 1 << 62) if fresh else None
            fold: TaskFold = await self.tasks.fold(self.tenant_id, found, before_seq=before)
            if fresh:
                fold.state = TaskState.TASK_STATE_SUBMITTED
                fold.status_message = None
            yield fold.task()
            if fold.ended and fold.run_id == run.run_id:
                return
            async for item in items:
                if isinstance(item, StreamEnd):
                    return  # the server ends the stream (shutdown): SubscribeToTask resumes
                for entry in item:
                    event = getattr(entry, "event", None)
                    if event is None:
                        continue
                    for out in fold.apply(event):
                        yield out
                    if fold.ended:
                        return
        finally:
            await items.aclose()
            follow.close()

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[A2aEvent]:
        found = await self._found(params.id)
        latest = found.latest
        if latest.status not in LIVE_STATUSES and (
            finished_state(latest.status, latest.stop_reason) in TERMINAL
        ):
            raise UnsupportedOperationError(message="the task is in a terminal state")
        follow = self.services.run_streams.follow(self.tenant_id, latest, deltas=False)
        async for event in self._stream(found.task_id, follow):
            yield event

    # ------------------------------------------------------------------ cancel

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        found = await self._found(params.id)
        latest = found.latest
        if latest.status not in LIVE_STATUSES:
            raise TaskNotCancelableError(message=f"task {params.id} is not working")
        try:
            await self.services.runs.cancel(self.tenant_id, found.session.session_id, latest.run_id)
        except AgentSessionError as exc:
            raise domain_error(exc) from None
        return await self._task(params.id)

    # ------------------------------------------------------------- push configs

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        found = await self._found(params.task_id)
        try:
            return await self.push.create(self.tenant_id, found.session.session_id, params)
        except InvalidRequest as exc:
            raise InvalidParamsError(message=f"{exc.code}: {exc}") from None

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        await self._found(params.task_id)
        return await self.push.get(self.tenant_id, params.task_id, params.id)

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        await self._found(params.task_id)
        configs = await self.push.list(self.tenant_id, params.task_id)
        return ListTaskPushNotificationConfigsResponse(configs=configs)

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        await self._found(params.task_id)
        await self.push.delete(self.tenant_id, params.task_id, params.id)

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        return self.cards.card(extended=True)
