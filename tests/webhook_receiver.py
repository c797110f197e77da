"""A loopback webhook receiver for tests: records every request, answers as told.

A plain ASGI app (served by `tests.loopback.serve` in a thread, or by uvicorn in a process of
its own for the fault test), so nothing of the service is involved in receiving. Signatures
are checked by the tests with the `standardwebhooks` library, an implementation independent
of ours.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Answers `status` (after `delay` seconds); a request to `redirect_path` is answered
    with a 302 to `/elsewhere` instead."""

    status: int = 204
    delay: float = 0.0
    redirect_path: str | None = None
    received: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the sender died mid-request: nothing was received
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        with self._lock:
            self.received.append(Received(scope["path"], headers, body))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.redirect_path is not None and scope["path"] == self.redirect_path:
            await send(
                {
                    "type": "http.response.start",
                    "status": 302,
                    "headers": [(b"location", b"/elsewhere")],
                }
            )
        else:
            await send({"type": "http.response.start", "status": self.status, "headers": []})
        await send({"type": "http.response.body", "body": b""})
