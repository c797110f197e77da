"""The async client: every route of the service as one typed method.

Writes carry an automatic Idempotency-Key (or the caller's), reused by every retry, so a
request repeated after a lost answer runs once and is answered with the first answer.
Requests are retried on 429 and 503 (honouring Retry-After) and on connection failures when
they are safe to repeat (see `RetryPolicy`). Streams resume on their own after a drop.

The sync client (`_sync.py`) is generated from this file by tools/unasync.py: edit this one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from types import TracebackType
from typing import Any, Literal

import httpx
from httpx_sse import aconnect_sse

from ._core import (
    STREAM_RECONNECT_LIMIT,
    Call,
    RetryPolicy,
    asks_to_come_back,
    clean,
    ends_run,
    gave_up,
    is_noise,
    keyed,
    ndjson_line,
    reconnect_delay,
    resume_headers,
    retry_after_of,
    segment,
    stream_params,
    to_frame,
)
from .errors import ConnectionFailedError, raise_for_problem
from .events import StreamFrame
from .models import (
    AgentList,
    AppendRead,
    CompactRead,
    ContextRead,
    ContinueRead,
    DelegateRead,
    DeliveryList,
    DeliveryRead,
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
    WebhookList,
    WebhookRead,
)

RunMode = Literal["wait", "stream", "background"]
Multitask = Literal["reject", "enqueue", "interrupt"]
Strategy = Literal["truncate", "summarize", "tool_results"]
JSON = dict[str, Any]


def _time(value: datetime | str | None) -> str | None:
    """A time as the service reads it (RFC 3339, with its zone)."""
    return value.isoformat() if isinstance(value, datetime) else value


def _s(session_id: str) -> str:
    return f"/v1/sessions/{segment(session_id)}"


def _sch(schedule_id: str) -> str:
    return f"/v1/schedules/{segment(schedule_id)}"


def _w(webhook_id: str) -> str:
    return f"/v1/webhooks/{segment(webhook_id)}"


class AsyncSessionClient:
    """The service's HTTP and SSE API, awaitable.

        async with AsyncSessionClient("http://127.0.0.1:8000", api_key=KEY) as asr:
            session = await asr.create_session(metadata={"user": "alice"})
            run = await asr.run(session.session_id, "hello")
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers={**(headers or {}), "Authorization": f"Bearer {api_key}"},
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncSessionClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # ------------------------------------------------------------------ one request, retried

    async def _send(self, call: Call[Any]) -> Any:
        """Send `call`, retrying per the policy; parse the final answer."""
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.params,
                    headers=call.headers,
                )
            except httpx.TransportError as error:
                if not self.retry.retries_error(call, error, attempt):
                    raise ConnectionFailedError(f"{call.method} {call.path}: {error!r}") from error
                await asyncio.sleep(self.retry.delay(attempt, None))
                continue
            if self.retry.retries_status(call, response.status_code, attempt):
                await asyncio.sleep(self.retry.delay(attempt, retry_after_of(response)))
                continue
            if call.method == "DELETE" and attempt > 1 and response.status_code == 404:
                return None  # an earlier attempt, whose answer was lost, did the deleting
            return call.parse(response)

    # ------------------------------------------------------------------------------ sessions

    async def create_session(
        self,
        *,
        session_id: str | None = None,
        metadata: JSON | None = None,
        agent: JSON | None = None,
        agent_name: str | None = None,
        binding: JSON | None = None,
        max_items: int | None = None,
        expires_at: datetime | str | None = None,
        idle_ttl_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> SessionRead:
        """Create a session (your own id or a generated one) and return its display snapshot.

        `expires_at` (a time with its zone) and `idle_ttl_seconds` are the session's own
        retention: deleted at that time, or when idle that long."""
        body = clean(
            session_id=session_id,
            metadata=metadata,
            agent=agent,
            agent_name=agent_name,
            binding=binding,
            max_items=max_items,
            expires_at=_time(expires_at),
            idle_ttl_seconds=idle_ttl_seconds,
        )
        return await self._send(keyed("POST", "/v1/sessions", SessionRead, body, idempotency_key))

    async def list_sessions(
        self,
        *,
        limit: int = 50,
        cursor: str | None = None,
        status: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> SessionList:
        """A page of sessions, newest first; pass `next_cursor` back as `cursor`."""
        params = clean(limit=limit, cursor=cursor, status=status)
        params.update({f"metadata.{k}": v for k, v in (metadata or {}).items()})
        return await self._send(Call("GET", "/v1/sessions", SessionList, params=params))

    async def get_session(self, session_id: str) -> SessionRead:
        return await self._send(Call("GET", _s(session_id), SessionRead))

    async def update_session(
        self,
        session_id: str,
        *,
        metadata: JSON | None = None,
        max_items: int | None = None,
        clear_window: bool | None = None,
        expires_at: datetime | str | None = None,
        idle_ttl_seconds: int | None = None,
        clear_retention: bool = False,
        idempotency_key: str | None = None,
    ) -> SessionRead:
        """Merge metadata (RFC 7386: None values delete keys) and/or change the memory window,
        and/or set the session's own retention (`expires_at`, `idle_ttl_seconds`;
        `clear_retention` clears both first)."""
        body = clean(metadata=metadata, max_items=max_items, clear_window=clear_window)
        if clear_retention:
            body.update(expires_at=None, idle_ttl_seconds=None)
        body.update(clean(expires_at=_time(expires_at), idle_ttl_seconds=idle_ttl_seconds))
        return await self._send(
            keyed("PATCH", _s(session_id), SessionRead, body, idempotency_key)
        )

    async def delete_session(self, session_id: str) -> None:
        """Erase the session, its events, snapshots and runs."""
        await self._send(Call("DELETE", _s(session_id)))

    async def append_items(
        self,
        session_id: str,
        items: list[JSON],
        *,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendRead:
        """Append memory items (messages, tool calls, outputs) without running the model."""
        body = clean(items=items, expected_seq=expected_seq)
        path = _s(session_id) + "/items"
        return await self._send(keyed("POST", path, AppendRead, body, idempotency_key))

    async def list_events(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        types: list[str] | None = None,
        run_id: str | None = None,
        limit: int = 100,
    ) -> EventList:
        params = clean(
            after_seq=after_seq,
            types=",".join(types) if types else None,
            run_id=run_id,
            limit=limit,
        )
        return await self._send(Call("GET", _s(session_id) + "/events", EventList, params=params))

    async def export_events(self, session_id: str) -> AsyncIterator[JSON]:
        """Every event of the session (NDJSON), parsed one line at a time."""
        headers = {"Accept": "application/x-ndjson"}
        path = _s(session_id) + "/events"
        async with self._http.stream("GET", path, headers=headers) as response:
            if response.status_code >= 400:
                await response.aread()
                raise_for_problem(response)
            async for line in response.aiter_lines():
                if line:
                    yield ndjson_line(line)

    async def export_sessions(
        self, *, cursor: str | None = None, limit: int | None = None
    ) -> AsyncIterator[JSON]:
        """Every session of the tenant with its ledger (JSON Lines), one parsed line at a
        time: a `session` line, its `event` lines and a `cursor` line per session, an `end`
        line last. Cut off, call again with the last `cursor` line's value."""
        params = {k: v for k, v in {"cursor": cursor, "limit": limit}.items() if v is not None}
        headers = {"Accept": "application/x-ndjson"}
        async with self._http.stream(
            "GET", "/v1/export/sessions", params=params, headers=headers
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                raise_for_problem(response)
            async for line in response.aiter_lines():
                if line:
                    yield ndjson_line(line)

    async def get_state(self, session_id: str) -> StateRead:
        """The recovery object (what `restore` accepts); its `version` is the ETag."""
        return await self._send(Call("GET", _s(session_id) + "/state", StateRead))

    async def get_shared_state(self, session_id: str) -> JSON:
        """The shared state: the JSON object the session shares with its frontend (AG-UI's
        `state`) and its model (the `update_state` tool)."""
        return await self._send(Call("GET", _s(session_id) + "/shared-state"))

    async def patch_shared_state(
        self,
        session_id: str,
        patch: list[JSON],
        *,
        if_match: int | None = None,
        idempotency_key: str | None = None,
    ) -> JSON:
        """Change the shared state by a JSON Patch (RFC 6902); returns the new state. A patch
        that does not apply is InvalidRequest (`invalid_patch`)."""
        call = keyed("PATCH", _s(session_id) + "/shared-state", None, patch, idempotency_key)
        call.headers["Content-Type"] = "application/json-patch+json"
        if if_match is not None:
            call.headers["If-Match"] = f'"{if_match}"'
        return await self._send(call)

    async def put_shared_state(
        self,
        session_id: str,
        state: JSON,
        *,
        if_match: int | None = None,
        idempotency_key: str | None = None,
    ) -> JSON:
        """Replace the shared state whole; returns it."""
        call = keyed("PUT", _s(session_id) + "/shared-state", None, state, idempotency_key)
        if if_match is not None:
            call.headers["If-Match"] = f'"{if_match}"'
        return await self._send(call)

    async def save(
        self,
        session_id: str,
        *,
        if_match: int | None = None,
        idempotency_key: str | None = None,
    ) -> SaveRead:
        """Write a snapshot; with `if_match` only at that version (else PreconditionFailed)."""
        call = keyed("POST", _s(session_id) + "/save", SaveRead, None, idempotency_key)
        if if_match is not None:
            call.headers["If-Match"] = f'"{if_match}"'
        return await self._send(call)

    async def resume(
        self,
        session_id: str,
        *,
        binding: JSON | None = None,
        idempotency_key: str | None = None,
    ) -> StateRead:
        """Load the session and record SESSION_RESUMED; `binding` must equal the stored one."""
        body = clean(binding=binding)
        path = _s(session_id) + "/resume"
        return await self._send(keyed("POST", path, StateRead, body, idempotency_key))

    async def fork(
        self,
        session_id: str,
        *,
        at_seq: int | None = None,
        new_session_id: str | None = None,
        metadata: JSON | None = None,
        binding: JSON | None = None,
        rebind: bool | None = None,
        idempotency_key: str | None = None,
    ) -> SessionRead:
        """A new session from the state at `at_seq` (default: the latest); the source stays."""
        body = clean(
            at_seq=at_seq,
            session_id=new_session_id,
            metadata=metadata,
            binding=binding,
            rebind=rebind,
        )
        path = _s(session_id) + "/fork"
        return await self._send(keyed("POST", path, SessionRead, body, idempotency_key))

    async def restore(
        self,
        session_id: str,
        state: JSON,
        *,
        if_match: int | None = None,
        idempotency_key: str | None = None,
    ) -> StateRead:
        """Install a recovery object (from `get_state`) as the memory baseline."""
        path = _s(session_id) + "/restore"
        call = keyed("POST", path, StateRead, {"state": state}, idempotency_key)
        if if_match is not None:
            call.headers["If-Match"] = f'"{if_match}"'
        return await self._send(call)

    async def projection(self, session_id: str) -> ProjectionRead:
        """The fold of the whole ledger, and whether it equals live memory."""
        return await self._send(Call("GET", _s(session_id) + "/projection", ProjectionRead))

    async def memory(
        self, session_id: str, *, full: bool = False, after_seq: int = 0, limit: int = 500
    ) -> MemoryView:
        params = {"full": str(full).lower(), "after_seq": after_seq, "limit": limit}
        return await self._send(Call("GET", _s(session_id) + "/memory", MemoryView, params=params))

    async def compact(
        self,
        session_id: str,
        *,
        strategy: Strategy | None = None,
        keep_last: int | None = None,
        tool_output_max_chars: int | None = None,
        reset_breaker: bool | None = None,
        idempotency_key: str | None = None,
    ) -> CompactRead:
        body = clean(
            strategy=strategy,
            keep_last=keep_last,
            tool_output_max_chars=tool_output_max_chars,
            reset_breaker=reset_breaker,
        )
        path = _s(session_id) + "/compact"
        return await self._send(keyed("POST", path, CompactRead, body, idempotency_key))

    async def context(
        self,
        session_id: str,
        *,
        max_input_tokens: int | None = None,
        reserved_output_tokens: int | None = None,
    ) -> ContextRead:
        """Preview the context projection for a token budget (memory is not changed)."""
        params = clean(
            max_input_tokens=max_input_tokens, reserved_output_tokens=reserved_output_tokens
        )
        path = _s(session_id) + "/context"
        return await self._send(Call("GET", path, ContextRead, params=params))

    # ---------------------------------------------------------------------------------- runs

    async def run(
        self,
        session_id: str,
        input: str | list[JSON] | None = None,
        *,
        mode: Literal["wait", "background"] = "wait",
        multitask: Multitask | None = None,
        client_tools: list[JSON] | None = None,
        approval_required: list[str] | None = None,
        limits: JSON | None = None,
        on_tool_error: Literal["stop", "feed_back"] | None = None,
        idempotency_key: str | None = None,
    ) -> RunRead:
        """Run the agent and wait for the result (or, `background`, return it as started);
        `stream_run` streams it."""
        body = clean(
            input=input,
            mode=mode,
            multitask=multitask,
            client_tools=client_tools,
            approval_required=approval_required,
            limits=limits,
            on_tool_error=on_tool_error,
        )
        path = _s(session_id) + "/runs"
        return await self._send(keyed("POST", path, RunRead, body, idempotency_key))

    async def run_once(
        self,
        input: str | list[JSON] | None,
        *,
        agent: JSON | None = None,
        keep: bool | None = None,
        client_tools: list[JSON] | None = None,
        limits: JSON | None = None,
        idempotency_key: str | None = None,
    ) -> RunRead:
        """`POST /v1/runs`: a run with an inline agent; its session is kept only with `keep`."""
        body = clean(input=input, agent=agent, keep=keep, client_tools=client_tools, limits=limits)
        return await self._send(keyed("POST", "/v1/runs", RunRead, body, idempotency_key))

    async def list_runs(self, session_id: str) -> RunList:
        return await self._send(Call("GET", _s(session_id) + "/runs", RunList))

    async def get_run(self, session_id: str, run_id: str) -> RunRead:
        return await self._send(Call("GET", f"{_s(session_id)}/runs/{segment(run_id)}", RunRead))

    async def cancel_run(self, session_id: str, run_id: str) -> RunRead:
        """Interrupt a run; a finished run is returned as it is (so retrying is harmless)."""
        path = f"{_s(session_id)}/runs/{segment(run_id)}/cancel"
        return await self._send(Call("POST", path, RunRead))

    async def submit_tool_outputs(
        self,
        session_id: str,
        outputs: list[dict[str, str]],
        *,
        replace: bool = False,
        continue_run: bool = True,
        mode: Literal["wait", "background"] = "wait",
        idempotency_key: str | None = None,
    ) -> RunRead | ContinueRead:
        """Answer pending client tool calls: the continued run (`RunRead`), or `ContinueRead`
        (`run` None) when nothing runs on (`continue_run=False`, `replace`)."""
        body = {"outputs": outputs, "replace": replace, "continue": continue_run, "mode": mode}
        path = _s(session_id) + "/tool-outputs"
        model = RunRead | ContinueRead
        return await self._send(keyed("POST", path, model, body, idempotency_key))

    async def decide_approval(
        self,
        session_id: str,
        call_id: str,
        decision: Literal["approve", "reject"],
        *,
        reason: str | None = None,
        continue_run: bool = True,
        mode: Literal["wait", "background"] = "wait",
        idempotency_key: str | None = None,
    ) -> RunRead | ContinueRead:
        """Approve or reject a pending call: `RunRead` of the continued run, or `ContinueRead`
        with `continue_run=False`."""
        body = clean(call_id=call_id, decision=decision, reason=reason, mode=mode)
        body["continue"] = continue_run
        path = _s(session_id) + "/approvals"
        model = RunRead | ContinueRead
        return await self._send(keyed("POST", path, model, body, idempotency_key))

    async def usage(self, session_id: str) -> UsageRead:
        return await self._send(Call("GET", _s(session_id) + "/usage", UsageRead))

    # ---------------------------------------------------------------------------- delegation

    async def delegate(
        self,
        session_id: str,
        input: str,
        *,
        agent: JSON | None = None,
        metadata: JSON | None = None,
        idempotency_key: str | None = None,
    ) -> DelegateRead:
        """A child session (same root) runs `input`; returns it with its finished run."""
        body = clean(input=input, agent=agent, metadata=metadata)
        path = _s(session_id) + "/delegate"
        return await self._send(keyed("POST", path, DelegateRead, body, idempotency_key))

    # ----------------------------------------------------- processes (when the server has them)

    async def list_processes(self, session_id: str) -> ProcessList:
        return await self._send(Call("GET", _s(session_id) + "/processes", ProcessList))

    async def start_process(
        self,
        session_id: str,
        command: str,
        *,
        timeout_seconds: float | None = None,
        stdin: str | None = None,
        idempotency_key: str | None = None,
    ) -> ProcessRead:
        body = clean(command=command, timeout_seconds=timeout_seconds, stdin=stdin)
        path = _s(session_id) + "/processes"
        return await self._send(keyed("POST", path, ProcessRead, body, idempotency_key))

    async def get_process(self, session_id: str, process_id: str) -> ProcessRead:
        path = f"{_s(session_id)}/processes/{segment(process_id)}"
        return await self._send(Call("GET", path, ProcessRead))

    async def process_logs(
        self, session_id: str, process_id: str, *, offset: int = 0, limit: int | None = None
    ) -> ProcessLogs:
        path = f"{_s(session_id)}/processes/{segment(process_id)}/logs"
        params = clean(offset=offset, limit=limit)
        return await self._send(Call("GET", path, ProcessLogs, params=params))

    async def write_stdin(
        self,
        session_id: str,
        process_id: str,
        data: str = "",
        *,
        eof: bool = False,
        idempotency_key: str | None = None,
    ) -> StdinRead:
        """Write to a running process's stdin. Not re-sent after a lost answer: stdin is
        outside the ledger, so the server cannot promise to write it only once."""
        path = f"{_s(session_id)}/processes/{segment(process_id)}/stdin"
        body = {"data": data, "eof": eof}
        call = keyed("POST", path, StdinRead, body, idempotency_key, retry_safe=False)
        return await self._send(call)

    async def stop_process(self, session_id: str, process_id: str) -> ProcessRead:
        path = f"{_s(session_id)}/processes/{segment(process_id)}/stop"
        return await self._send(Call("POST", path, ProcessRead))

    # ----------------------------------------------------------------------------- catalogue

    async def list_tools(self) -> ToolList:
        return await self._send(Call("GET", "/v1/tools", ToolList))

    async def list_models(self) -> ModelProfileList:
        """The model profiles an agent's `provider` can name (never their keys)."""
        return await self._send(Call("GET", "/v1/models", ModelProfileList))

    async def list_agents(self) -> AgentList:
        return await self._send(Call("GET", "/v1/agents", AgentList))

    async def list_event_types(self) -> EventTypeList:
        """Every event type with its payload's JSON Schema."""
        return await self._send(Call("GET", "/v1/event-types", EventTypeList))

    # ------------------------------------------------------------------------------ webhooks

    async def create_webhook(
        self,
        url: str,
        event_types: list[str],
        *,
        session_id: str | None = None,
        metadata_filter: JSON | None = None,
        description: str | None = None,
        idempotency_key: str | None = None,
    ) -> WebhookCreated:
        """Subscribe `url` to event types (`*`: all). Keep the answer's `secret`: no other
        answer shows it, and deliveries are signed with it (Standard Webhooks)."""
        body = clean(
            url=url,
            event_types=event_types,
            session_id=session_id,
            metadata_filter=metadata_filter,
            description=description,
        )
        call = keyed("POST", "/v1/webhooks", WebhookCreated, body, idempotency_key)
        return await self._send(call)

    async def list_webhooks(self, *, limit: int = 50, cursor: str | None = None) -> WebhookList:
        params = clean(limit=limit, cursor=cursor)
        return await self._send(Call("GET", "/v1/webhooks", WebhookList, params=params))

    async def get_webhook(self, webhook_id: str) -> WebhookRead:
        return await self._send(Call("GET", _w(webhook_id), WebhookRead))

    async def update_webhook(self, webhook_id: str, changes: JSON) -> WebhookRead:
        """Change fields as given (`None` clears `session_id`, `metadata_filter` or
        `description`); `{"state": "active"}` turns a disabled subscription on again."""
        return await self._send(Call("PATCH", _w(webhook_id), WebhookRead, json=changes))

    async def delete_webhook(self, webhook_id: str) -> None:
        await self._send(Call("DELETE", _w(webhook_id)))

    async def list_webhook_deliveries(
        self,
        webhook_id: str,
        *,
        limit: int = 50,
        cursor: str | None = None,
        status: str | None = None,
    ) -> DeliveryList:
        """The subscription's delivery log, newest first."""
        params = clean(limit=limit, cursor=cursor, status=status)
        path = _w(webhook_id) + "/deliveries"
        return await self._send(Call("GET", path, DeliveryList, params=params))

    async def get_webhook_delivery(self, webhook_id: str, delivery_id: str) -> DeliveryRead:
        path = f"{_w(webhook_id)}/deliveries/{segment(delivery_id)}"
        return await self._send(Call("GET", path, DeliveryRead))

    async def redeliver_webhook(self, webhook_id: str, delivery_id: str) -> DeliveryRead:
        """Send a delivery again (it becomes pending and due now)."""
        path = f"{_w(webhook_id)}/deliveries/{segment(delivery_id)}/redeliver"
        return await self._send(Call("POST", path, DeliveryRead))

    # ----------------------------------------------------------------------------- schedules

    async def create_schedule(
        self,
        *,
        session_id: str | None = None,
        agent_name: str | None = None,
        input: str | list[JSON] | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        interval_seconds: int | None = None,
        missed: Literal["skip", "run_once"] | None = None,
        multitask: Literal["skip", "enqueue", "interrupt"] | None = None,
        metadata: JSON | None = None,
        paused: bool | None = None,
        idempotency_key: str | None = None,
    ) -> ScheduleRead:
        """A schedule that runs `input` on `session_id` (or on a new session of the blueprint
        `agent_name`) at each tick of `cron` (in `timezone`) or every `interval_seconds`."""
        body = clean(
            session_id=session_id,
            agent_name=agent_name,
            input=input,
            cron=cron,
            timezone=timezone,
            interval_seconds=interval_seconds,
            missed=missed,
            multitask=multitask,
            metadata=metadata,
            paused=paused,
        )
        return await self._send(
            keyed("POST", "/v1/schedules", ScheduleRead, body, idempotency_key)
        )

    async def list_schedules(self, *, limit: int = 50, cursor: str | None = None) -> ScheduleList:
        """A page of schedules, newest first; pass `next_cursor` back as `cursor`."""
        params = clean(limit=limit, cursor=cursor)
        return await self._send(Call("GET", "/v1/schedules", ScheduleList, params=params))

    async def get_schedule(self, schedule_id: str) -> ScheduleRead:
        return await self._send(Call("GET", _sch(schedule_id), ScheduleRead))

    async def update_schedule(self, schedule_id: str, **changes: Any) -> ScheduleRead:
        """Change `input`, `cron`, `timezone`, `interval_seconds`, `missed`, `multitask` or
        `metadata` (only those given; a new cadence starts from now)."""
        return await self._send(Call("PATCH", _sch(schedule_id), ScheduleRead, json=changes))

    async def delete_schedule(self, schedule_id: str) -> None:
        """Delete the schedule (the runs it started stay)."""
        await self._send(Call("DELETE", _sch(schedule_id)))

    async def pause_schedule(self, schedule_id: str) -> ScheduleRead:
        return await self._send(Call("POST", _sch(schedule_id) + "/pause", ScheduleRead))

    async def resume_schedule(self, schedule_id: str) -> ScheduleRead:
        return await self._send(Call("POST", _sch(schedule_id) + "/resume", ScheduleRead))

    async def trigger_schedule(
        self, schedule_id: str, *, idempotency_key: str | None = None
    ) -> ScheduleFireRead:
        """Fire the schedule now; a retry (same key) gets the same run."""
        path = _sch(schedule_id) + "/trigger"
        return await self._send(keyed("POST", path, ScheduleFireRead, None, idempotency_key))

    async def list_schedule_runs(
        self, schedule_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> ScheduleFireList:
        """What the schedule's ticks did, newest first: the runs it started, and skips."""
        params = clean(limit=limit, cursor=cursor)
        path = _sch(schedule_id) + "/runs"
        return await self._send(Call("GET", path, ScheduleFireList, params=params))

    # ------------------------------------------------------------------------------- streams

    async def create_stream_token(
        self, *, session_id: str | None = None, ttl_seconds: int | None = None
    ) -> StreamTokenRead:
        """A short-lived `?token=` for a browser's EventSource (this client needs none)."""
        body = clean(session_id=session_id, ttl_seconds=ttl_seconds)
        return await self._send(Call("POST", "/v1/stream-tokens", StreamTokenRead, json=body))

    async def stream_run(
        self,
        session_id: str,
        input: str | list[JSON] | None = None,
        *,
        multitask: Multitask | None = None,
        client_tools: list[JSON] | None = None,
        approval_required: list[str] | None = None,
        limits: JSON | None = None,
        include_deltas: bool = True,
        idempotency_key: str | None = None,
    ) -> AsyncIterator[StreamFrame]:
        """Run the agent in stream mode: its events (id = seq) and deltas, until RUN_FINISHED.

        Each frame is typed (`asr_client.events`): a ledger event's model (`RunFinishedEvent`,
        ... with its typed `payload`) or a `DeltaFrame`; `event`, `data` and `id` as before.

        After a drop the run is not started again: before its first event the same request
        is sent again with the same Idempotency-Key (the server streams the run it already
        started); after it, the session's timeline is followed from the last seq seen until
        the run's RUN_FINISHED. Deltas sent while disconnected are lost (they are not in the
        ledger); events never are.
        """
        body = clean(
            input=input,
            mode="stream",
            multitask=multitask,
            client_tools=client_tools,
            approval_required=approval_required,
            limits=limits,
            include_deltas=include_deltas,
        )
        start = keyed("POST", _s(session_id) + "/runs", None, body, idempotency_key)
        last_seq = 0
        run_id: str | None = None
        async for frame in self._stream_frames(start):
            if frame.id is not None:
                if int(frame.id) <= last_seq:
                    continue  # a replayed start sends the run's events again
                last_seq = int(frame.id)
                run_id = run_id or frame.data.get("run_id")
            yield frame
            if ends_run(frame, run_id):
                return
        if run_id is None:
            raise gave_up()
        follow = self._follow(
            _s(session_id) + "/events/stream",
            {"include": "deltas"} if include_deltas else {},
            str(last_seq),
        )
        async for frame in follow:
            if frame.id is not None and frame.data.get("run_id") != run_id:
                continue
            yield frame
            if ends_run(frame, run_id):
                return

    async def _stream_frames(self, start: Call[Any]) -> AsyncIterator[StreamFrame]:
        """The frames of a POSTed stream; sent again (same key) while no event has come."""
        failures = 0
        seen_event = False
        while True:
            try:
                async with aconnect_sse(
                    self._http, start.method, start.path, json=start.json, headers=start.headers
                ) as source:
                    response = source.response
                    if response.status_code >= 400:
                        await response.aread()
                        if self.retry.retries_status(start, response.status_code, failures + 1):
                            failures += 1
                            await asyncio.sleep(
                                self.retry.delay(failures, retry_after_of(response))
                            )
                            continue
                        raise_for_problem(response)
                    previous: str | None = None
                    async for sse in source.aiter_sse():
                        if is_noise(sse):
                            continue
                        frame = to_frame(sse, previous)
                        previous = sse.id or None
                        if asks_to_come_back(frame):
                            break
                        seen_event = seen_event or frame.id is not None
                        yield frame
                    else:
                        return  # the server ended the stream: the run is over
            except httpx.TransportError:
                pass
            if seen_event:
                return  # the caller follows the session's timeline from here
            failures += 1
            if failures > STREAM_RECONNECT_LIMIT:
                raise gave_up()
            await asyncio.sleep(reconnect_delay(failures))

    async def stream_events(
        self,
        session_id: str,
        *,
        after_seq: int | None = None,
        types: list[str] | None = None,
        deltas: bool = False,
    ) -> AsyncIterator[StreamFrame]:
        """The session's timeline: replay after `after_seq`, then live, resumed from the last
        event id after any drop (and after the server's `overflow` or `shutdown` frames)."""
        path = _s(session_id) + "/events/stream"
        cursor = str(after_seq) if after_seq is not None else None
        async for frame in self._follow(path, stream_params(types, deltas), cursor):
            yield frame

    async def stream_tenant_events(
        self, *, after: str | None = None, types: list[str] | None = None
    ) -> AsyncIterator[StreamFrame]:
        """Every session of the tenant, resumed from the last (opaque) event id after a drop."""
        async for frame in self._follow("/v1/events/stream", stream_params(types), after):
            yield frame

    async def _follow(
        self, path: str, params: dict[str, Any], last_id: str | None
    ) -> AsyncIterator[StreamFrame]:
        failures = 0
        while True:
            wait: float | None = None
            try:
                async with aconnect_sse(
                    self._http, "GET", path, params=params, headers=resume_headers(last_id)
                ) as source:
                    response = source.response
                    if response.status_code >= 400:
                        await response.aread()
                        if response.status_code not in (429, 503):
                            raise_for_problem(response)
                        wait = retry_after_of(response)
                    else:
                        failures = 0  # connected: the backoff starts over
                        previous: str | None = None
                        async for sse in source.aiter_sse():
                            if is_noise(sse):
                                continue
                            frame = to_frame(sse, previous)
                            previous = sse.id or None
                            if asks_to_come_back(frame):
                                break
                            if frame.id is not None:
                                last_id = frame.id
                            yield frame
            except httpx.TransportError:
                pass  # a dropped connection (RemoteProtocolError, ReadError, timeouts)
            failures += 1
            if failures > STREAM_RECONNECT_LIMIT:
                raise gave_up()
            if wait is not None:
                await asyncio.sleep(self.retry.delay(failures, wait))
            else:
                await asyncio.sleep(reconnect_delay(failures))

