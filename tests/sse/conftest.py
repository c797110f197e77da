"""The SSE tier: real `asr serve` processes, a raw frame reader, producers and gauges.

Frames are parsed here from raw lines rather than with httpx-sse where the test must see
comments (pings) and `retry:` lines, which an EventSource parser swallows.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conftest import Server, TenantKey, start_server, stop_server

# Short intervals so that pings, polls and timeouts are observable within seconds.
SSE_ENV = {
    "ASR_DEBUG_ENDPOINTS": "true",
    "ASR_SSE_PING_SECONDS": "1",
    "ASR_SSE_POLL_SECONDS": "1",
    "ASR_SSE_SEND_TIMEOUT_SECONDS": "3",
    "ASR_SSE_SHUTDOWN_GRACE_SECONDS": "2",
    "ASR_SSE_RETRY_MS": "1500",
    "ASR_SSE_QUEUE_SIZE": "256",
    "ASR_SSE_MAX_STREAMS_PER_TENANT": "400",
    "ASR_SSE_LISTEN_KEEPALIVE_SECONDS": "1",
}


def start_sse_server(database_url: str, log_dir: Any, name: str, **env: str) -> Server:
    return start_server(database_url, log_dir / f"{name}.log", **{**SSE_ENV, **env})


def wait_listening(server: Server, within: float = 30) -> None:
    """Return once the server's LISTEN connection listens on every channel (its bus says so
    at /debug/streams): `/healthz` answers before that, and a NOTIFY sent in between (a
    delta, which nothing catches up on) is lost to it."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:  # bounded by `within`
        gauges = httpx.get(server.base_url + "/debug/streams", timeout=2).json()
        if gauges["bus"].get("listener", {}).get("connected"):
            return
        time.sleep(0.05)
    raise AssertionError(f"{server.base_url} did not LISTEN within {within} s")


def stop_and_check(server: Server) -> None:
    stop_server(server)
    assert "Traceback" not in server.log(), server.log()[-4000:]


@pytest.fixture(scope="session")
def sse_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_sse_server(database_url, tmp_path_factory.mktemp("sse"), "sse")
    yield srv
    stop_and_check(srv)


@pytest.fixture
async def http(sse_server: Server, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=sse_server.base_url,
        headers=tenant.headers,
        timeout=httpx.Timeout(15, read=10),
        limits=httpx.Limits(max_connections=200),
    ) as client:
        yield client


@dataclass
class Frame:
    id: str | None = None
    event: str | None = None
    data: str | None = None
    retry: int | None = None
    comment: str | None = None

    @property
    def json(self) -> Any:
        return json.loads(self.data or "null")


def read_frames(response: httpx.Response) -> AsyncIterator[Frame]:
    return parse_frames(response.aiter_lines())


async def parse_frames(lines: AsyncIterator[str]) -> AsyncIterator[Frame]:
    """Frames as the wire carries them (WHATWG field parsing), comments included."""
    frame, seen = Frame(), False
    async for line in lines:
        if line == "":
            if seen:
                yield frame
            frame, seen = Frame(), False
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        seen = True
        if name == "":
            frame.comment = value
        elif name == "id":
            frame.id = value
        elif name == "event":
            frame.event = value
        elif name == "data":
            frame.data = value if frame.data is None else f"{frame.data}\n{value}"
        elif name == "retry":
            frame.retry = int(value)


class RawStream:
    """An SSE request on a socket configured before connecting (httpx sets socket options
    only after connect, too late for SO_RCVBUF), so a test can freeze, slow down or reset a
    client the way real networks do."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.status: int | None = None

    @classmethod
    async def open(
        cls, server: Server, path: str, headers: dict[str, str], *, rcvbuf: int | None = None
    ) -> RawStream:
        host, port = server.base_url.removeprefix("http://").split(":")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
        # A small reader limit keeps what asyncio buffers in user space small too.
        reader, writer = await asyncio.open_connection(sock=sock, limit=8192)
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Accept: text/event-stream"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        return cls(reader, writer)

    async def read_head(self) -> int:
        head = await self.reader.readuntil(b"\r\n\r\n")
        self.status = int(head.split(b" ", 2)[1])
        return self.status

    async def _lines(self) -> AsyncIterator[str]:
        pending = ""
        while True:  # chunked transfer coding; ends with the zero-size chunk
            size = int((await self.reader.readline()).strip() or b"0", 16)
            if size == 0:
                return
            pending += (await self.reader.readexactly(size)).decode()
            await self.reader.readexactly(2)
            *complete, pending = pending.split("\r\n")
            for line in complete:
                yield line

    def frames(self) -> AsyncIterator[Frame]:
        return parse_frames(self._lines())

    def reset(self) -> None:
        """Close with RST (SO_LINGER 0), as a crashed client or a dropped network would."""
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    def close(self) -> None:
        self.writer.close()


def user_item(text: str) -> dict[str, str]:
    return {"type": "message", "role": "user", "content": text}


async def new_session(http: httpx.AsyncClient) -> str:
    response = await http.post("/v1/sessions", json={})
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


async def append_item(http: httpx.AsyncClient, session_id: str, text: str = "x") -> int:
    """One MEMORY_ITEMS_APPENDED event; returns the session's new last seq."""
    body = {"items": [user_item(text)]}
    response = await http.post(f"/v1/sessions/{session_id}/items", json=body)
    assert response.status_code == 201, response.text
    return response.json()["last_seq"]


async def gauges(base_url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        return (await client.get("/debug/streams")).json()


async def wait_until(
    probe: Callable[[], Awaitable[bool]], *, within: float, every: float = 0.05
) -> float:
    """Poll `probe` until it is true; returns the seconds it took (fails after `within`)."""
    started = time.monotonic()
    for _ in range(int(within / every) + 1):
        if await probe():
            return time.monotonic() - started
        await asyncio.sleep(every)
    raise AssertionError(f"condition not met within {within} s")


async def session_seqs(http: httpx.AsyncClient, session_id: str) -> list[int]:
    response = await http.get(f"/v1/sessions/{session_id}/events", params={"limit": 1000})
    return [e["seq"] for e in response.json()["data"]]
