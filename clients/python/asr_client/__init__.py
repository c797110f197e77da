"""Python client for the Agent Session Runtime: `AsyncSessionClient` and `SessionClient`.

    from asr_client import SessionClient

    with SessionClient("http://127.0.0.1:8000", api_key=KEY) as asr:
        session = asr.create_session(metadata={"user": "alice"})
        run = asr.run(session.session_id, "hello")
        for frame in asr.stream_events(session.session_id, after_seq=0):
            print(frame.id, frame.event)
            if isinstance(frame, events.RunFinishedEvent):  # typed: asr_client.events
                print(frame.payload.stop_reason)

Depends on httpx, httpx-sse and pydantic only.
"""

from ._async import AsyncSessionClient
from ._core import RetryPolicy, new_idempotency_key
from ._frame import Frame
from ._sync import SessionClient
from .errors import (
    ApiError,
    AsrError,
    AuthenticationError,
    ConflictError,
    ConnectionFailedError,
    NotFoundError,
    PayloadTooLargeError,
    PreconditionFailedError,
    RateLimitedError,
    ServerError,
    ValidationError,
)
from .events import DeltaFrame, EventFrame, LedgerEvent, StreamFrame

__version__ = "0.1.1"

__all__ = [
    "ApiError",
    "AsrError",
    "AsyncSessionClient",
    "AuthenticationError",
    "ConflictError",
    "ConnectionFailedError",
    "DeltaFrame",
    "EventFrame",
    "Frame",
    "LedgerEvent",
    "NotFoundError",
    "PayloadTooLargeError",
    "PreconditionFailedError",
    "RateLimitedError",
    "RetryPolicy",
    "ServerError",
    "SessionClient",
    "StreamFrame",
    "ValidationError",
    "new_idempotency_key",
]
