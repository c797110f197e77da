"""The Python client's retries (issue #18), against a real HTTP server on loopback that
answers 429 and 503 with Retry-After, or drops the connection, as told.

The waits are recorded, not slept: a `RetryPolicy` subclass notes the Retry-After it was
asked to honour and returns 0, so nothing here depends on the clock.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from asr_client import (
    AsyncSessionClient,
    ConnectionFailedError,
    RateLimitedError,
    RetryPolicy,
    ServerError,
    SessionClient,
)
from asr_client.models import SaveRead

from tests.conftest import free_port

SAVED = {"session_id": "s1", "snapshot_seq": 3, "version": 4}


@dataclass(frozen=True)
class Recording(RetryPolicy):
    """Retries as the default policy decides, but waits no time: it notes the wait."""

    waits: list[float | None] = field(default_factory=list)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        self.waits.append(retry_after)
        return 0.0


@dataclass
class Script:
    """What the server answers, one entry per request: (status, headers, body) or "drop"."""

    answers: list[Any]
    seen: list[dict[str, str]] = field(default_factory=list)


class Handler(BaseHTTPRequestHandler):
    script: Script

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.script.seen.append({"method": self.command, "path": self.path, **self.headers})
        answer = self.script.answers.pop(0) if self.script.answers else (500, {}, {})
        if answer == "drop":
            self.close_connection = True
            self.connection.close()
            return
        status, headers, body = answer
        raw = json.dumps(body).encode()
        self.send_response(status)
        media = "application/problem+json" if status >= 400 else "application/json"
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(raw)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:  # quiet
        pass


@pytest.fixture
def scripted() -> Iterator[tuple[str, Script]]:
    script = Script(answers=[])
    handler = type("ScriptedHandler", (Handler,), {"script": script})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", script
    server.shutdown()
    server.server_close()


def problem(status: int, code: str, retry_after: str) -> tuple[int, dict[str, str], dict]:
    body = {"type": f"urn:asr:problem:{code}", "title": code, "status": status, "code": code}
    return status, {"Retry-After": retry_after}, body


def test_a_keyed_write_is_retried_after_429_and_503_with_the_same_key(
    scripted: tuple[str, Script],
) -> None:
    url, script = scripted
    script.answers = [
        problem(429, "too_many_runs", "3"),
        problem(503, "database_unavailable", "1"),
        (200, {}, SAVED),
    ]
    policy = Recording()
    with SessionClient(url, api_key="k", retry=policy) as asr:
        saved = asr.save("s1", if_match=4)
    assert isinstance(saved, SaveRead) and saved.version == 4
    assert policy.waits == [3.0, 1.0]  # each Retry-After, as the server said it
    keys = [seen["Idempotency-Key"] for seen in script.seen]
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0].startswith("asr-py-")
    assert {seen["If-Match"] for seen in script.seen} == {'"4"'}


async def test_the_async_client_retries_the_same_way(scripted: tuple[str, Script]) -> None:
    url, script = scripted
    script.answers = [problem(503, "database_unavailable", "2"), (200, {}, SAVED)]
    policy = Recording()
    async with AsyncSessionClient(url, api_key="k", retry=policy) as asr:
        saved = await asr.save("s1", idempotency_key="mine")
    assert saved.snapshot_seq == 3
    assert policy.waits == [2.0]
    assert [seen["Idempotency-Key"] for seen in script.seen] == ["mine", "mine"]


def test_it_gives_up_after_max_attempts_with_the_last_problem(
    scripted: tuple[str, Script],
) -> None:
    url, script = scripted
    script.answers = [problem(429, "too_many_streams", "1")] * 3
    policy = Recording(max_attempts=3)
    with SessionClient(url, api_key="k", retry=policy) as asr, pytest.raises(RateLimitedError):
        asr.list_sessions()
    assert len(script.seen) == 3 and policy.waits == [1.0, 1.0]


def test_other_errors_are_not_retried(scripted: tuple[str, Script]) -> None:
    url, script = scripted
    script.answers = [(500, {}, {"type": "x", "title": "x", "status": 500, "code": "internal"})]
    with SessionClient(url, api_key="k", retry=Recording()) as asr, pytest.raises(ServerError):
        asr.list_tools()
    assert len(script.seen) == 1


def test_a_lost_answer_is_retried_for_safe_requests_only(scripted: tuple[str, Script]) -> None:
    """A dropped connection after sending: a read or a keyed write goes again; stdin, which
    the server cannot write exactly once, does not."""
    url, script = scripted
    script.answers = ["drop", (200, {}, SAVED)]
    with SessionClient(url, api_key="k", retry=Recording()) as asr:
        assert asr.save("s1").version == 4
    first, second = script.seen
    assert first["Idempotency-Key"] == second["Idempotency-Key"]

    script.seen.clear()
    script.answers = ["drop", (200, {}, {"process_id": "p", "bytes_written": 1, "eof": False})]
    with (
        SessionClient(url, api_key="k", retry=Recording()) as asr,
        pytest.raises(ConnectionFailedError),
    ):
        asr.write_stdin("s1", "p", "x")
    assert len(script.seen) == 1


def test_a_refused_connection_is_retried_then_reported() -> None:
    policy = Recording(max_attempts=3)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with SessionClient(url, api_key="k", retry=policy) as asr:
        with pytest.raises(ConnectionFailedError):
            asr.get_session("s1")
    assert policy.waits == [None, None]  # backoff, no Retry-After to honour


def test_a_delete_whose_answer_was_lost_counts_as_done(scripted: tuple[str, Script]) -> None:
    url, script = scripted
    gone = {"type": "t", "title": "t", "status": 404, "code": "session_not_found"}
    script.answers = ["drop", (404, {}, gone)]
    with SessionClient(url, api_key="k", retry=Recording()) as asr:
        assert asr.delete_session("s1") is None
    assert [seen["method"] for seen in script.seen] == ["DELETE", "DELETE"]


def test_retry_after_as_an_http_date_is_understood() -> None:
    import httpx
    from asr_client._core import retry_after_of

    gone = httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert retry_after_of(gone) == 0.0
    assert retry_after_of(httpx.Response(503, headers={"Retry-After": "7"})) == 7.0
    assert retry_after_of(httpx.Response(503, headers={"Retry-After": "soon"})) is None
    assert retry_after_of(httpx.Response(503)) is None


def test_waits_are_capped_and_backoff_is_bounded() -> None:
    policy = RetryPolicy(backoff_base=0.5, backoff_max=2.0, max_retry_after=30.0)
    assert policy.delay(1, 3600.0) == 30.0
    assert all(0.0 <= policy.delay(n, None) <= 2.0 for n in range(1, 12))


def test_the_event_loop_is_not_blocked_by_waits() -> None:
    """The async client sleeps with asyncio (a sync sleep would stall every other task)."""
    import inspect

    from asr_client import _async

    source = inspect.getsource(_async)
    assert "asyncio.sleep(" in source and "time.sleep(" not in source
    assert asyncio.iscoroutinefunction(_async.AsyncSessionClient.save)
