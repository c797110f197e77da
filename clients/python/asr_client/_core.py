"""What the async and the sync client share: request descriptions, the retry policy, answer
parsing and SSE frames. Only the transport call differs between the two clients (the sync
one is generated from the async one, see tools/unasync.py).
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import cache
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from ._frame import Frame
from .errors import ServerError, raise_for_problem
from .events import (
    EVENT_MODELS,
    DeltaFrame,
    ProblemFrame,
    ShutdownFrame,
    StreamEndFrame,
    StreamFrame,
)

T = TypeVar("T")

RETRY_STATUSES = frozenset({429, 503})
STREAM_RECONNECT_LIMIT = 20
_STREAM_COME_BACK = ("overflow", "shutdown")


def new_idempotency_key() -> str:
    """A fresh key for one logical request; every retry of that request reuses it."""
    return f"asr-py-{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request: where it goes, its body, and how to read the answer.

    `retry_safe` says whether the request may be sent again after it may have reached the
    server (a reset after sending): true for reads, for writes that carry an Idempotency-Key
    (the server runs the work once and replays its answer), and for verbs that are idempotent
    by nature (cancel, stop). A refusal (429, 503) or a connection never made is retried for
    every request: nothing ran.
    """

    method: str
    path: str
    model: Any = None
    json: Any = None
    params: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    retry_safe: bool = True

    def parse(self, response: httpx.Response) -> T:
        raise_for_problem(response)
        if response.status_code == 204 or self.model is None:
            return response.json() if response.content else None  # type: ignore[no-any-return]
        return _adapter(self.model).validate_python(response.json())  # type: ignore[no-any-return]


def keyed(
    method: str, path: str, model: Any, body: Any, key: str | None, *, retry_safe: bool = True
) -> Call[Any]:
    """A write with an Idempotency-Key: the caller's, or a new one shared by every retry."""
    headers = {"Idempotency-Key": key or new_idempotency_key()}
    return Call(method, path, model, json=body, headers=headers, retry_safe=retry_safe)


@cache
def _adapter(model: Any) -> TypeAdapter[Any]:
    return TypeAdapter(model)


def segment(value: str) -> str:
    """A path segment from a caller's id (ids are plain, but never trust that)."""
    return quote(value, safe="")


def clean(**values: Any) -> dict[str, Any]:
    """The given values without the ones left out (None)."""
    return {k: v for k, v in values.items() if v is not None}


# ------------------------------------------------------------------------------ retries


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how long to wait before sending a request again.

    Retried: 429 and 503 answers (the server refused before doing anything; `Retry-After`
    says when to come back and is honoured up to `max_retry_after`), connections that could
    not be made, and -- for requests that are safe to repeat -- connections lost after
    sending. Without `Retry-After` the wait is exponential with full jitter, so many clients
    that failed together do not come back together.
    """

    max_attempts: int = 4
    backoff_base: float = 0.25
    backoff_max: float = 8.0
    max_retry_after: float = 60.0

    def retries_status(self, call: Call[Any], status: int, attempt: int) -> bool:
        return status in RETRY_STATUSES and attempt < self.max_attempts

    def retries_error(self, call: Call[Any], error: httpx.TransportError, attempt: int) -> bool:
        if attempt >= self.max_attempts:
            return False
        never_sent = isinstance(error, httpx.ConnectError | httpx.ConnectTimeout)
        return never_sent or call.retry_safe

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt `attempt + 1`."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        return random.uniform(0, ceiling)


NO_RETRIES = RetryPolicy(max_attempts=1)


def retry_after_of(response: httpx.Response) -> float | None:
    """`Retry-After` in seconds: delta-seconds or an HTTP date; None when absent or bad."""
    raw = response.headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    if raw.isdigit():
        return float(raw)
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


# ------------------------------------------------------------------------------ streams


def ndjson_line(line: str) -> dict[str, Any]:
    """One line of an NDJSON export: one event."""
    value = json.loads(line)
    return value if isinstance(value, dict) else {"value": value}


def is_noise(sse: Any) -> bool:
    """The stream's opening `retry:` line arrives as an empty message: not a frame."""
    return sse.event == "message" and not sse.data


def to_frame(sse: Any, previous_id: str | None) -> StreamFrame:
    """The typed frame of a decoded SSE message. `previous_id` is the id of the last message
    on the same connection: the SSE decoder carries an id over to the messages after it (as
    the spec's last-event-id buffer does), so a repeat means the frame had no id of its own
    (a delta, or a control frame). Event ids never repeat: they are seqs or cursors."""
    own_id = sse.id if sse.id and sse.id != previous_id else None
    try:
        data = json.loads(sse.data) if sse.data else {}
    except ValueError:
        data = {"raw": sse.data}
    if not isinstance(data, dict):
        data = {"value": data}
    return typed_frame(sse.event, data, own_id)


def typed_frame(event: str, data: dict[str, Any], id: str | None) -> StreamFrame:
    """The model of a frame (see `asr_client.events`): a ledger event's by its `type`, a
    delta, a control frame or a problem. What fits none (a newer server's event type, a
    field this client reads otherwise) is a plain `Frame`: a stream never fails on a type."""
    if id is not None:
        model: type[Frame] | None = EVENT_MODELS.get(str(data.get("type")))
    else:
        model = _FRAME_MODELS.get(event)
    if model is not None:
        try:
            return model.of(event, data, id)
        except PydanticValidationError:
            pass
    return Frame.of(event, data, id)


_FRAME_MODELS: dict[str, type[Frame]] = {
    "delta": DeltaFrame,
    "reasoning_delta": DeltaFrame,
    "overflow": StreamEndFrame,
    "shutdown": ShutdownFrame,
    "ERROR": ProblemFrame,
}


def asks_to_come_back(frame: Frame) -> bool:
    """`overflow` and `shutdown`: the server ends the stream and asks for a reconnect."""
    return frame.event in _STREAM_COME_BACK


def stream_params(
    types: list[str] | None = None, deltas: bool = False, after: str | None = None
) -> dict[str, Any]:
    return clean(
        types=",".join(types) if types else None,
        include="deltas" if deltas else None,
        after=after,
    )


def resume_headers(last_id: str | None) -> dict[str, str]:
    return {"Last-Event-ID": last_id} if last_id else {}


def reconnect_delay(failures: int) -> float:
    return min(2.0, 0.05 * 2 ** (failures - 1))


def gave_up() -> ServerError:
    detail = f"gave up after {STREAM_RECONNECT_LIMIT} reconnects in a row without an answer"
    return ServerError(503, {"code": "stream_unavailable", "detail": detail})


def ends_run(frame: Frame, run_id: str | None) -> bool:
    """The frame that closes a streamed run: its RUN_FINISHED event."""
    return frame.event == "RUN_FINISHED" and (
        run_id is None or frame.data.get("run_id") == run_id
    )

