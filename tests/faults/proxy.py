"""A loopback TCP proxy to PostgreSQL that loses the reply to a finished commit.

The fault it makes is the one an Idempotency-Key must survive: the database committed, the
client never heard so. It reads the backend's messages (a 1-byte type, then an int32 length
that counts itself) from server to client; when a chunk holds a ReadyForQuery ('Z') whose
transaction status is idle ('I') after a CommandComplete ('C') or a PortalSuspended ('s') —
a COMMIT, or a statement in autocommit, has just finished — it drops that chunk with
probability `probability` and closes both sides instead of forwarding it. Client to server,
bytes pass through untouched; only the first few are read to see whether an SSL or GSS
encryption request comes first (the server answers those with one untyped byte, 'N' here).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from collections import Counter

_NEGOTIATION_CODES = (80877103, 80877104)  # SSLRequest, GSSENCRequest
_CHUNK = 65536


class BackendParser:
    """Splits the server-to-client byte stream into messages, chunk by chunk."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.untyped = 0  # one-byte answers to encryption requests still to come
        self.opaque = False  # encryption was accepted: nothing more can be read
        self.completed = False  # a CommandComplete since the last ReadyForQuery
        self.tag = ""  # the last CommandComplete's tag ("COMMIT", "SELECT 1", ...)

    def feed(self, chunk: bytes) -> bool:
        """Consume `chunk`; True when it ends a finished statement in an idle session."""
        commit_reply = False
        self.buffer += chunk
        at = 0
        while not self.opaque and at < len(self.buffer):
            if self.untyped:
                self.untyped -= 1
                self.opaque = self.buffer[at : at + 1] != b"N"
                at += 1
                continue
            if len(self.buffer) - at < 5:
                break
            kind = self.buffer[at : at + 1]
            (length,) = struct.unpack_from("!i", self.buffer, at + 1)
            if len(self.buffer) - at < 1 + length:
                break
            if kind == b"C":
                self.completed = True
                tag = bytes(self.buffer[at + 5 : at + length]).rstrip(b"\0")
                self.tag = tag.decode(errors="replace").split(" ")[0]
            elif kind == b"s":
                # PortalSuspended ends an Execute with a row limit (asyncpg's fetchrow): the
                # statement ran, and in autocommit the Sync that follows commits it, so it
                # counts as a finished statement just as a CommandComplete does.
                self.completed = True
                self.tag = "SUSPENDED"
            elif kind == b"E":
                self.completed = False  # an error in the same sync block: not a commit
            elif kind == b"Z":
                status = self.buffer[at + 5 : at + 6]
                commit_reply = commit_reply or (self.completed and status == b"I")
                self.completed = False
            at += 1 + length
        del self.buffer[:at]
        if self.opaque:
            self.buffer.clear()
        return commit_reply


class ReplyDropProxy:
    """Listens on 127.0.0.1 (free port) and forwards each connection to the upstream port."""

    def __init__(self, upstream_port: int, *, probability: float, seed: int = 15) -> None:
        self.upstream_port = upstream_port
        self.probability = probability
        self.rng = random.Random(seed)
        self.drops = 0
        self.dropped: Counter[str] = Counter()  # lost replies by command tag
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            server_r, server_w = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", self.upstream_port), 10
            )
        except (OSError, TimeoutError):
            client_w.transport.abort()
            return
        self._writers.update((client_w, server_w))
        parser = BackendParser()
        upstream = asyncio.create_task(self._to_server(client_r, server_w, parser))
        try:
            await self._to_client(server_r, client_w, server_w, parser)
        finally:
            upstream.cancel()
            await asyncio.gather(upstream, return_exceptions=True)
            for writer in (client_w, server_w):
                writer.transport.abort()
                self._writers.discard(writer)

    async def _to_server(
        self, client_r: asyncio.StreamReader, server_w: asyncio.StreamWriter, parser: BackendParser
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            # The encryption requests come first, each 8 bytes; the server answers each with
            # one byte, which the parser must count before the typed messages start.
            while True:
                head = await client_r.readexactly(8)
                (code,) = struct.unpack_from("!i", head, 4)
                if code in _NEGOTIATION_CODES:
                    parser.untyped += 1
                server_w.write(head)
                await server_w.drain()
                if code not in _NEGOTIATION_CODES:
                    break
            while chunk := await client_r.read(_CHUNK):
                server_w.write(chunk)
                await server_w.drain()
        server_w.transport.abort()

    async def _to_client(
        self,
        server_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        server_w: asyncio.StreamWriter,
        parser: BackendParser,
    ) -> None:
        with contextlib.suppress(OSError):
            while chunk := await server_r.read(_CHUNK):
                if parser.feed(chunk) and self.rng.random() < self.probability:
                    # The statement finished in the database; its reply is lost with the link.
                    self.drops += 1
                    self.dropped[parser.tag] += 1
                    return
                client_w.write(chunk)
                await client_w.drain()
