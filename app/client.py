"""Python clients for the service: `AsyncSessionClient` and `SessionClient` (sync), on httpx.

Every route is one call, typed with the service's own pydantic models; a problem+json answer
raises a typed `ApiError` subclass; SSE timelines are iterators that resume from the last
event id on their own after a dropped connection, an `overflow` or a `shutdown` frame.

    async with AsyncSessionClient("http://127.0.0.1:8000", api_key=KEY) as asr:
        session = await asr.create_session(metadata={"user": "alice"})
        result = await asr.run(session.session_id, "hello")
        async for frame in asr.stream_events(session.session_id, after_seq=0):
            print(frame.event, frame.data)

Every method is written once: it describes its request and how to read the answer, and
`_call` performs it -- awaitable in the async client, direct in the sync one.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import httpx
from httpx_sse import aconnect_sse, connect_sse
from pydantic import TypeAdapter

from app.api.schemas import (
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
    SessionList,
    SessionRead,
    StateRead,
    StdinRead,
    StreamTokenRead,
    ToolList,
    UsageRead,
)

RECONNECT_LIMIT = 20


class ApiError(Exception):
    """A problem+json answer: `status`, stable `code`, and the whole `problem` body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        self.code = str(problem.get("code", f"http_{status}"))
        super().__init__(f"{status} {self.code}: {problem.get('detail') or problem.get('title')}")


class AuthenticationError(ApiError): ...


class NotFoundError(ApiError): ...


class ConflictError(ApiError): ...


class PreconditionFailedError(ApiError): ...


class ValidationError(ApiError): ...


class PayloadTooLargeError(ApiError): ...


class RateLimitedError(ApiError):
    @property
    def retry_after(self) -> int:
        return int(self.problem.get("retry_after", 1))


class ServerError(ApiError): ...


_ERRORS: dict[int, type[ApiError]] = {
    401: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    412: PreconditionFailedError,
    413: PayloadTooLargeError,
    422: ValidationError,
    429: RateLimitedError,
}


def raise_for_problem(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        problem = response.json()
    except ValueError:
        problem = {"title": response.text[:200]}
    cls = _ERRORS.get(
        response.status_code, ServerError if response.status_code >= 500 else ApiError
    )
    raise cls(response.status_code, problem)


@dataclass(frozen=True, slots=True)
class Frame:
    """One SSE frame: an event (`id` set, `data` the event JSON) or a control/delta frame."""

    event: str
    data: dict[str, Any]
    id: str | None


@dataclass(frozen=True, slots=True)
class _Req:
    method: str
    path: str
    model: Any = None  # a pydantic model, a union of them, or None (raw JSON)
    json: Any = None
    params: dict[str, Any] | None = None
    headers: dict[str, str] | None = None


def _clean(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _parse(req: _Req, response: httpx.Response) -> Any:
    raise_for_problem(response)
    if response.status_code == 204 or req.model is None:
        return response.json() if response.content else None
    return _adapter(req.model).validate_python(response.json())


@cache
def _adapter(model: Any) -> TypeAdapter[Any]:
    return TypeAdapter(model)


def _key(idempotency_key: str | None) -> dict[str, str] | None:
    return {"Idempotency-Key": idempotency_key} if idempotency_key else None


class _Routes:
    """Each route once, as a request description handed to `_call`."""

    def _call(self, req: _Req) -> Any:  # pragma: no cover - provided by the clients
        raise NotImplementedError

    # sessions
    def create_session(self, *, idempotency_key: str | None = None, **body: Any) -> Any:
        return self._call(
            _Req("POST", "/v1/sessions", SessionRead, body, headers=_key(idempotency_key))
        )

    def list_sessions(
        self,
        *,
        limit: int = 50,
        cursor: str | None = None,
        status: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> Any:
        params = _clean(limit=limit, cursor=cursor, status=status)
        params.update({f"metadata.{k}": v for k, v in (metadata or {}).items()})
        return self._call(_Req("GET", "/v1/sessions", SessionList, params=params))

    def get_session(self, session_id: str) -> Any:
        return self._call(_Req("GET", f"/v1/sessions/{session_id}", SessionRead))

    def update_session(self, session_id: str, **body: Any) -> Any:
        return self._call(_Req("PATCH", f"/v1/sessions/{session_id}", SessionRead, body))

    def delete_session(self, session_id: str) -> Any:
        return self._call(_Req("DELETE", f"/v1/sessions/{session_id}"))

    def append_items(
        self, session_id: str, items: list[dict[str, Any]], *, expected_seq: int | None = None
    ) -> Any:
        body = _clean(items=items, expected_seq=expected_seq)
        return self._call(_Req("POST", f"/v1/sessions/{session_id}/items", AppendRead, body))

    def list_events(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        types: list[str] | None = None,
        run_id: str | None = None,
        limit: int = 100,
    ) -> Any:
        params = _clean(
            after_seq=after_seq,
            types=",".join(types) if types else None,
            run_id=run_id,
            limit=limit,
        )
        return self._call(
            _Req("GET", f"/v1/sessions/{session_id}/events", EventList, params=params)
        )

    def get_state(self, session_id: str) -> Any:
        return self._call(_Req("GET", f"/v1/sessions/{session_id}/state", StateRead))

    def save(self, session_id: str, *, if_match: int | None = None) -> Any:
        headers = {"If-Match": f'"{if_match}"'} if if_match is not None else None
        return self._call(
            _Req("POST", f"/v1/sessions/{session_id}/save", SaveRead, headers=headers)
        )

    def resume(self, session_id: str, *, binding: dict[str, Any] | None = None) -> Any:
        body = _clean(binding=binding)
        return self._call(_Req("POST", f"/v1/sessions/{session_id}/resume", StateRead, body))

    def fork(self, session_id: str, **body: Any) -> Any:
        return self._call(_Req("POST", f"/v1/sessions/{session_id}/fork", SessionRead, body))

    def restore(self, session_id: str, state: dict[str, Any]) -> Any:
        body = {"state": state}
        return self._call(_Req("POST", f"/v1/sessions/{session_id}/restore", StateRead, body))

    def projection(self, session_id: str) -> Any:
        return self._call(_Req("GET", f"/v1/sessions/{session_id}/projection", ProjectionRead))

    def memory(self, session_id: str, *, full: bool = False, after_seq: int = 0) -> Any:
        params = {"full": str(full).lower(), "after_seq": after_seq}
        return self._call(
            _Req("GET", f"/v1/sessions/{session_id}/memory", MemoryView, params=params)
        )

    def compact(self, session_id: str, **body: Any) -> Any:
        return self._call(_Req("POST", f"/v1/sessions/{session_id}/compact", CompactRead, body))

    def context(self, session_id: str, *, max_input_tokens: int | None = None) -> Any:
        params = _clean(max_input_tokens=max_input_tokens)
        return self._call(
            _Req("GET", f"/v1/sessions/{session_id}/context", ContextRead, params=params)
        )

    # runs
    def run(
        self,
        session_id: str,
        input: Any = None,
        *,
        mode: str = "wait",
        idempotency_key: str | None = None,
        **options: Any,
    ) -> Any:
        """Run the agent (mode wait or background); see `stream_run` for mode stream."""
        body = {"input": input, "mode": mode, **options}
        path = f"/v1/sessions/{session_id}/runs"
        return self._call(_Req("POST", path, RunRead, body, headers=_key(idempotency_key)))

    def run_once(self, input: Any, *, idempotency_key: str | None = None, **options: Any) -> Any:
        """`POST /v1/runs`: a run with an inline `agent`, its session not kept unless `keep`."""
        body = {"input": input, **options}
        return self._call(_Req("POST", "/v1/runs", RunRead, body, headers=_key(idempotency_key)))

    def list_runs(self, session_id: str) -> Any:
        return self._call(_Req("GET", f"/v1/sessions/{session_id}/runs", RunList))

    def get_run(self, session_id: str, run_id: str) -> Any:
        return self._call(_Req("GET", f"/v1/sessions/{session_id}/runs/{run_id}", RunRead))

    def cancel_run(self, session_id: str, run_id: str) -> Any:
        return self._call(_Req("POST", f"/v1/sessions/{session_id}/runs/{run_id}/cancel", RunRead))

    def submit_tool_outputs(
        self,
        session_id: str,
        outputs: list[dict[str, str]],
        *,
        replace: bool = False,
        continue_run: bool = True,
        mode: str = "wait",
    ) -> Any:
        """Answer pending client tool calls: the continued run (`RunRead`), or a
        `ContinueRead` (`run` None) when nothing runs on (`continue_run=False`, `replace`)."""
        body = {"outputs": outputs, "replace": replace, "continue": continue_run, "mode": mode}
        return self._call(
            _Req("POST", f"/v1/sessions/{session_id}/tool-outputs", RunRead | ContinueRead, body)
        )

    def decide_approval(
        self,
        session_id: str,
        call_id: str,
        decision: str,
        *,
        reason: str | None = None,
        continue_run: bool = True,
        mode: str = "wait",
    ) -> Any:
        """`approve` or `reject` a pending call: `RunRead` of the continued run, or
        `ContinueRead` with `continue_run=False`."""
        body = _clean(call_id=call_id, decision=decision, reason=reason, mode=mode) | {
            "continue": continue_run
        }
        return self._call(
            _Req("POST", f"/v1/sessions/{session_id}/approvals", RunRead | ContinueRead, body)
        )

    def usage(self, session_id: str) -> Any:
        return self._call(_Req("GET", f"/v1/sessions/{session_id}/usage", UsageRead))

    # delegation
    def delegate(
        self,
        session_id: str,
        input: str,
        *,
        agent: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        body = _clean(input=input, agent=agent, metadata=metadata)
        path = f"/v1/sessions/{session_id}/delegate"
        return self._call(_Req("POST", path, DelegateRead, body, headers=_key(idempotency_key)))

    # processes (404 `processes_disabled` unless the server enables them)
    def list_processes(self, session_id: str) -> Any:
        return self._call(_Req("GET", f"/v1/sessions/{session_id}/processes", ProcessList))

    def start_process(
        self,
        session_id: str,
        command: str,
        *,
        timeout_seconds: float | None = None,
        stdin: str | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        body = _clean(command=command, timeout_seconds=timeout_seconds, stdin=stdin)
        path = f"/v1/sessions/{session_id}/processes"
        return self._call(_Req("POST", path, ProcessRead, body, headers=_key(idempotency_key)))

    def get_process(self, session_id: str, process_id: str) -> Any:
        path = f"/v1/sessions/{session_id}/processes/{process_id}"
        return self._call(_Req("GET", path, ProcessRead))

    def process_logs(
        self, session_id: str, process_id: str, *, offset: int = 0, limit: int | None = None
    ) -> Any:
        path = f"/v1/sessions/{session_id}/processes/{process_id}/logs"
        params = _clean(offset=offset, limit=limit)
        return self._call(_Req("GET", path, ProcessLogs, params=params))

    def write_stdin(
        self,
        session_id: str,
        process_id: str,
        data: str = "",
        *,
        eof: bool = False,
        idempotency_key: str | None = None,
    ) -> Any:
        path = f"/v1/sessions/{session_id}/processes/{process_id}/stdin"
        body = {"data": data, "eof": eof}
        return self._call(_Req("POST", path, StdinRead, body, headers=_key(idempotency_key)))

    def stop_process(self, session_id: str, process_id: str) -> Any:
        path = f"/v1/sessions/{session_id}/processes/{process_id}/stop"
        return self._call(_Req("POST", path, ProcessRead))

    # server catalogue
    def list_tools(self) -> Any:
        return self._call(_Req("GET", "/v1/tools", ToolList))

    def list_agents(self) -> Any:
        return self._call(_Req("GET", "/v1/agents", AgentList))

    def list_models(self) -> Any:
        """The model profiles an agent's `provider` can name (never their keys)."""
        return self._call(_Req("GET", "/v1/models", ModelProfileList))

    def list_event_types(self) -> Any:
        """Every event type with its payload's JSON Schema (what events of each type hold)."""
        return self._call(_Req("GET", "/v1/event-types", EventTypeList))

    # streams
    def create_stream_token(
        self, *, session_id: str | None = None, ttl_seconds: int | None = None
    ) -> Any:
        """A short-lived `?token=` for a browser's EventSource (this client needs none)."""
        body = _clean(session_id=session_id, ttl_seconds=ttl_seconds)
        return self._call(_Req("POST", "/v1/stream-tokens", StreamTokenRead, body))


def _stream_params(
    types: list[str] | None = None, deltas: bool = False, after: str | None = None
) -> dict[str, Any]:
    return _clean(
        types=",".join(types) if types else None,
        include="deltas" if deltas else None,
        after=after,
    )


def _is_noise(sse: Any) -> bool:
    """The stream's opening `retry:` line arrives as an empty message: not a frame."""
    return sse.event == "message" and not sse.data


def _frame(sse: Any) -> Frame:
    try:
        data = json.loads(sse.data) if sse.data else {}
    except ValueError:
        data = {"raw": sse.data}
    return Frame(event=sse.event, data=data, id=sse.id or None)


class AsyncSessionClient(_Routes):
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncSessionClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, req: _Req) -> Any:
        response = await self._http.request(
            req.method, req.path, json=req.json, params=req.params, headers=req.headers
        )
        return _parse(req, response)

    async def export_events(self, session_id: str) -> AsyncIterator[dict[str, Any]]:
        """Every event of the session, as NDJSON lines parsed one by one."""
        headers = {"Accept": "application/x-ndjson"}
        async with self._http.stream(
            "GET", f"/v1/sessions/{session_id}/events", headers=headers
        ) as r:
            if r.status_code >= 400:
                await r.aread()
                raise_for_problem(r)
            async for line in r.aiter_lines():
                if line:
                    yield json.loads(line)

    async def stream_run(
        self, session_id: str, input: Any = None, **options: Any
    ) -> AsyncIterator[Frame]:
        """Start a run in mode stream and yield its frames until RUN_FINISHED."""
        body = {"input": input, "mode": "stream", **options}
        async with aconnect_sse(
            self._http, "POST", f"/v1/sessions/{session_id}/runs", json=body
        ) as source:
            if source.response.status_code >= 400:
                await source.response.aread()
                raise_for_problem(source.response)
            async for sse in source.aiter_sse():
                if not _is_noise(sse):
                    yield _frame(sse)

    async def stream_events(
        self,
        session_id: str,
        *,
        after_seq: int | None = None,
        types: list[str] | None = None,
        deltas: bool = False,
    ) -> AsyncIterator[Frame]:
        """The session's live timeline, resumed from the last event id after any drop."""
        path = f"/v1/sessions/{session_id}/events/stream"
        cursor = str(after_seq) if after_seq is not None else None
        async for frame in self._follow(path, _stream_params(types, deltas), cursor):
            yield frame

    async def stream_tenant_events(
        self, *, after: str | None = None, types: list[str] | None = None
    ) -> AsyncIterator[Frame]:
        """Every session of the tenant, resumed from the last (opaque) event id after a drop."""
        async for frame in self._follow("/v1/events/stream", _stream_params(types), after):
            yield frame

    async def _follow(
        self, path: str, params: dict[str, Any], last_id: str | None
    ) -> AsyncIterator[Frame]:
        failures = 0
        while True:
            try:
                async with aconnect_sse(
                    self._http, "GET", path, params=params, headers=_resume(last_id)
                ) as source:
                    if source.response.status_code >= 400:
                        await source.response.aread()
                        raise_for_problem(source.response)
                    failures = 0  # connected: the backoff starts over
                    async for sse in source.aiter_sse():
                        if _is_noise(sse):
                            continue
                        frame = _frame(sse)
                        if frame.event in _COME_BACK:
                            break  # the server asks us to come back with our cursor
                        if sse.id:
                            last_id = sse.id
                        yield frame
            except httpx.TransportError:
                pass  # a dropped connection (RemoteProtocolError, ReadError, timeouts)
            failures += 1
            if failures > RECONNECT_LIMIT:
                raise _gave_up()
            await asyncio.sleep(_backoff(failures))


class SessionClient(_Routes):
    """The same routes, blocking (for scripts and notebooks)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> SessionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, req: _Req) -> Any:
        response = self._http.request(
            req.method, req.path, json=req.json, params=req.params, headers=req.headers
        )
        return _parse(req, response)

    def export_events(self, session_id: str) -> Iterator[dict[str, Any]]:
        """Every event of the session, as NDJSON lines parsed one by one."""
        headers = {"Accept": "application/x-ndjson"}
        with self._http.stream("GET", f"/v1/sessions/{session_id}/events", headers=headers) as r:
            if r.status_code >= 400:
                r.read()
                raise_for_problem(r)
            for line in r.iter_lines():
                if line:
                    yield json.loads(line)

    def stream_run(self, session_id: str, input: Any = None, **options: Any) -> Iterator[Frame]:
        """Start a run in mode stream and yield its frames until RUN_FINISHED."""
        body = {"input": input, "mode": "stream", **options}
        with connect_sse(
            self._http, "POST", f"/v1/sessions/{session_id}/runs", json=body
        ) as source:
            if source.response.status_code >= 400:
                source.response.read()
                raise_for_problem(source.response)
            for sse in source.iter_sse():
                if not _is_noise(sse):
                    yield _frame(sse)

    def stream_events(
        self,
        session_id: str,
        *,
        after_seq: int | None = None,
        types: list[str] | None = None,
        deltas: bool = False,
    ) -> Iterator[Frame]:
        """The session's live timeline, resumed from the last event id after any drop."""
        path = f"/v1/sessions/{session_id}/events/stream"
        cursor = str(after_seq) if after_seq is not None else None
        return self._follow(path, _stream_params(types, deltas), cursor)

    def stream_tenant_events(
        self, *, after: str | None = None, types: list[str] | None = None
    ) -> Iterator[Frame]:
        """Every session of the tenant, resumed from the last (opaque) event id after a drop."""
        return self._follow("/v1/events/stream", _stream_params(types), after)

    def _follow(self, path: str, params: dict[str, Any], last_id: str | None) -> Iterator[Frame]:
        failures = 0
        while True:
            try:
                with connect_sse(
                    self._http, "GET", path, params=params, headers=_resume(last_id)
                ) as source:
                    if source.response.status_code >= 400:
                        source.response.read()
                        raise_for_problem(source.response)
                    failures = 0
                    for sse in source.iter_sse():
                        if _is_noise(sse):
                            continue
                        frame = _frame(sse)
                        if frame.event in _COME_BACK:
                            break
                        if sse.id:
                            last_id = sse.id
                        yield frame
            except httpx.TransportError:
                pass
            failures += 1
            if failures > RECONNECT_LIMIT:
                raise _gave_up()
            time.sleep(_backoff(failures))


_COME_BACK = ("overflow", "shutdown")


def _resume(last_id: str | None) -> dict[str, str]:
    return {"Last-Event-ID": last_id} if last_id else {}


def _backoff(failures: int) -> float:
    return min(2.0, 0.05 * 2 ** (failures - 1))


def _gave_up() -> ServerError:
    detail = f"gave up after {RECONNECT_LIMIT} reconnects in a row without an answer"
    return ServerError(503, {"code": "stream_unavailable", "detail": detail})
