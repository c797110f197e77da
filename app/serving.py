"""How `asr serve` holds its connections: a header-read timeout and a connection cap.

uvicorn closes idle keep-alive connections, but not one that has sent half a request head
(issue #17, "Slowloris exhausts file descriptors"): a client trickling `GET / HTTP/1.1\\r\\n`
could hold a file descriptor for ever, and about a thousand of them locked every new client
out. The protocol here arms a timer when a connection opens and when a new request head
begins, and closes the connection if the head is not complete in time. The timer stops at
the end of the head, so a long response (an SSE stream) is never cut by it.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.settings import Settings

logger = logging.getLogger("app.serving")

# File descriptors a process needs besides client sockets: the database pool and its
# overflow, LISTEN connections, log files, the listening socket, MCP and tool subprocesses.
FD_HEADROOM = 64


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose request head is too slow."""

    header_timeout: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_task: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Arm at once: a connection that opens and sends nothing is as slow as a half head."""
        super().connection_made(transport)
        self._arm_header_timeout()

    def on_message_begin(self) -> None:
        """A new head (the first byte of a keep-alive request) gets the full time from here."""
        super().on_message_begin()
        if self.header_timeout_task is None:
            self._arm_header_timeout()

    def on_headers_complete(self) -> None:
        """The head is in: from here on only the response's own pace matters."""
        self._cancel_header_timeout()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        """No timer may outlive its connection."""
        self._cancel_header_timeout()
        super().connection_lost(exc)

    def _arm_header_timeout(self) -> None:
        self._cancel_header_timeout()
        self.header_timeout_task = self.loop.call_later(
            self.header_timeout, self._header_timeout_expired
        )

    def _cancel_header_timeout(self) -> None:
        if self.header_timeout_task is not None:
            self.header_timeout_task.cancel()
            self.header_timeout_task = None

    def _header_timeout_expired(self) -> None:
        """Close the slow connection, unless a response is still being written on it.

        A pipelined head that starts while the previous response streams is only waiting
        for its turn; closing then would cut the stream, so the timer is armed again.
        """
        self.header_timeout_task = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self._arm_header_timeout()
            return
        logger.debug("closing a connection whose request head took over %ss", self.header_timeout)
        self.transport.close()


def http_protocol(settings: Settings) -> type[HeaderTimeoutProtocol]:
    """The protocol class for `uvicorn.Config(http=...)`, carrying this server's timeout."""

    class Protocol(HeaderTimeoutProtocol):
        header_timeout = settings.header_timeout_seconds

    return Protocol


def warn_if_cap_exceeds_fd_limit(settings: Settings) -> None:
    """Log when the connection cap leaves no room below `ulimit -n` for the rest of the process.

    Past the descriptor limit `accept()` fails with EMFILE and new clients hang in the
    listen backlog instead of receiving the cap's prompt 503.
    """
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = settings.max_connections + settings.db_pool_size + settings.db_max_overflow
    if soft != resource.RLIM_INFINITY and needed + FD_HEADROOM > soft:
        logger.warning(
            "ASR_MAX_CONNECTIONS=%d plus the database pool (%d) and %d spare descriptors "
            "exceed ulimit -n (%d): raise the limit or lower the cap",
            settings.max_connections,
            settings.db_pool_size + settings.db_max_overflow,
            FD_HEADROOM,
            soft,
        )
