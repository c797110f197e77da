"""A loopback TCP proxy that a test can stop and start again: a database outage on demand.

It runs in the test's event loop (so the test must await, not block, while it matters),
listens on a fixed 127.0.0.1 port and forwards each connection to one loopback upstream.
`stop()` closes the listener (new connections are refused) and aborts every proxied
connection (RST both ways), as a crashed or unplugged database server would; `start()`
listens on the same port again.
"""

from __future__ import annotations

import asyncio
import contextlib

_CHUNK = 65536


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        assert upstream_host in ("127.0.0.1", "localhost", "::1"), "loopback upstreams only"
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._live: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> TcpProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Listen (again) on 127.0.0.1, on the same port as before if there was one."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Refuse new connections and abort the live ones."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._live):
                writer.transport.abort()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._live |= {writer, up_writer}
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._live -= {writer, up_writer}
            for end in (writer, up_writer):
                end.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    writer.transport.abort()
