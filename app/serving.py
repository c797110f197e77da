"""How `asr serve` runs: its connections (a header-read timeout, a connection cap, and the
eviction of slow heads at the cap) and its processes (one, or `--workers N` on one shared
socket).

uvicorn closes idle keep-alive connections, but not one that has sent half a request head
(slowloris): a client trickling `GET / HTTP/1.1\\r\\n`
could hold a file descriptor for ever, and about a thousand of them locked every new client
out. The protocol here arms a timer when a connection opens and when a new request head
begins, and closes the connection if the head is not complete in time. The timer stops at
the end of the head, so a long response (an SSE stream) is never cut by it.

A timeout alone still leaves a window: slow clients that reconnect whenever they are cut
keep the process at its descriptor limit, where `accept()` fails and the event loop drops
what waits in the backlog, normal clients included. So the connections still sending their
heads are also kept in the order they began, and at the connection cap the oldest of them is
closed to make room (eviction): by a new connection, once that head is older than a short
grace (ASR_SLOW_HEAD_GRACE_SECONDS); by a new connection a small margin past the cap, or by a
complete request head, whatever its age. A normal client sends its head at once, leaves that
queue within milliseconds and is served; a slow one is at its front.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import resource
import secrets
import signal
import socket
import threading
import time
from collections import OrderedDict
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.settings import Settings

logger = logging.getLogger("app.serving")

# File descriptors a process needs besides client sockets: the database pool and its
# overflow, LISTEN connections, log files, the listening socket, MCP and tool subprocesses.
FD_HEADROOM = 64
# New connections a process takes past its cap while every slow head is younger than the
# grace; at this margin a new connection closes the oldest slow head whatever its age. It is
# taken from FD_HEADROOM, so the process stays below its descriptor limit.
CAP_MARGIN = 16
# The smallest cap the descriptor limit may lower ASR_MAX_CONNECTIONS to.
MIN_CAP = 16
# At most one warning about evictions in this many seconds.
EVICTION_LOG_SECONDS = 10.0


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose request head is too slow,
    and, at the connection cap, the oldest connection still sending its head."""

    header_timeout: ClassVar[float] = 5.0
    # Per server (http_protocol makes a subclass for each): the cap, and eviction's settings.
    cap: ClassVar[int | None] = None
    evict: ClassVar[bool] = False
    grace: ClassVar[float] = 1.0
    # The connections whose head has begun (or that have sent nothing yet), oldest first,
    # with the monotonic time their head began. Shared by the server's connections (each
    # server's subclass has its own).
    heads: ClassVar[OrderedDict[HeaderTimeoutProtocol, float]] = OrderedDict()
    evictions: ClassVar[int] = 0
    evictions_logged: ClassVar[int] = 0
    evictions_logged_at: ClassVar[float] = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_task: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Arm at once: a connection that opens and sends nothing is as slow as a half head.
        At the cap, make room by closing the oldest slow head; far past it with none to
        close (every connection busy), refuse this one rather than run out of descriptors."""
        super().connection_made(transport)
        self._arm_header_timeout()
        cap = self.cap
        if cap is None or not self.evict or len(self.connections) < cap:
            return
        over_margin = len(self.connections) >= cap + CAP_MARGIN
        if self._evict_oldest_head(grace=0.0 if over_margin else self.grace):
            return
        if over_margin:
            logger.debug("refusing a connection: %d open, none still sending its head",
                         len(self.connections))  # fmt: skip
            self._forget()
            self.transport.close()

    def on_message_begin(self) -> None:
        """A new head (the first byte of a keep-alive request) gets the full time from here."""
        super().on_message_begin()
        if self.header_timeout_task is None:
            self._arm_header_timeout()

    def on_headers_complete(self) -> None:
        """The head is in: from here on only the response's own pace matters. At the cap a
        complete request is served in place of the oldest slow head rather than refused."""
        self._cancel_header_timeout()
        cap = self.cap
        if (
            cap is not None
            and self.evict
            and len(self.connections) >= cap
            and len(self.tasks) < cap
            and self._evict_oldest_head(grace=0.0)
        ):
            # Served in the closed one's place: uvicorn's own count (up to CAP_MARGIN past
            # the cap while slow heads churn) must not turn it into a 503.
            self.limit_concurrency = None
            try:
                super().on_headers_complete()
            finally:
                self.limit_concurrency = cap
            return
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
        self.heads[self] = time.monotonic()  # a new head goes to the back of the queue

    def _cancel_header_timeout(self) -> None:
        if self.header_timeout_task is not None:
            self.header_timeout_task.cancel()
            self.header_timeout_task = None
        self.heads.pop(self, None)

    def _responding(self) -> bool:
        """A response is still being written (a pipelined head only waits for its turn)."""
        return self.cycle is not None and not self.cycle.response_complete

    def _header_timeout_expired(self) -> None:
        """Close the slow connection, unless a response is still being written on it.

        A pipelined head that starts while the previous response streams is only waiting
        for its turn; closing then would cut the stream, so the timer is armed again.
        """
        self.header_timeout_task = None
        self.heads.pop(self, None)
        if self.transport.is_closing():
            return
        if self._responding():
            self._arm_header_timeout()
            return
        logger.debug("closing a connection whose request head took over %ss", self.header_timeout)
        self.transport.close()

    def _evict_oldest_head(self, grace: float) -> bool:
        """Close the connection that has been sending its head the longest, if it began at
        least `grace` seconds ago and no response is being written on it. True if one was."""
        limit = time.monotonic() - grace
        for other, began in self.heads.items():
            if began > limit:
                return False  # the rest began later still
            if other is self or other._responding() or other.transport.is_closing():
                continue
            other._forget()
            other.transport.close()
            type(self)._count_eviction()
            return True
        return False

    def _forget(self) -> None:
        """Out of the queue and the server's connection count at once: the transport's own
        close reports the loss on a later turn of the loop, after the next arrivals."""
        self._cancel_header_timeout()
        self.connections.discard(self)

    @classmethod
    def _count_eviction(cls) -> None:
        cls.evictions += 1
        now = time.monotonic()
        if now - cls.evictions_logged_at >= EVICTION_LOG_SECONDS:
            logger.warning(
                "connection cap (%s) reached: closed %d connections still sending their "
                "request heads since the last report (slow clients?)",
                cls.cap,
                cls.evictions - cls.evictions_logged,
            )
            cls.evictions_logged, cls.evictions_logged_at = cls.evictions, now


def http_protocol(settings: Settings, cap: int | None = None) -> type[HeaderTimeoutProtocol]:
    """The protocol class for `uvicorn.Config(http=...)`, carrying this server's timeout,
    its connection cap (None: none) and its eviction settings."""

    class Protocol(HeaderTimeoutProtocol):
        header_timeout = settings.header_timeout_seconds
        evict = settings.evict_slow_heads
        grace = settings.slow_head_grace_seconds
        heads: ClassVar[OrderedDict[HeaderTimeoutProtocol, float]] = OrderedDict()

    Protocol.cap = cap
    return Protocol


def connection_cap(settings: Settings) -> int:
    """ASR_MAX_CONNECTIONS, lowered if needed to fit under the descriptor limit.

    Past the descriptor limit `accept()` fails with EMFILE and the event loop drops what
    waits in the listen backlog: the cap exists to stay below it. The soft limit is raised
    towards the hard one first (as far as the cap needs); what still does not fit lowers the
    cap, with a warning.
    """
    wanted = settings.max_connections
    others = settings.db_pool_size + settings.db_max_overflow + FD_HEADROOM
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or wanted + others <= soft:
        return wanted
    target = wanted + others if hard == resource.RLIM_INFINITY else min(hard, wanted + others)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if wanted + others <= soft:
        return wanted
    cap = max(MIN_CAP, soft - others)
    logger.warning(
        "ASR_MAX_CONNECTIONS=%d plus the database pool (%d) and %d spare descriptors "
        "exceed ulimit -n (%d): the cap is %d; raise the limit for more",
        wanted,
        settings.db_pool_size + settings.db_max_overflow,
        FD_HEADROOM,
        soft,
        cap,
    )
    return cap


# ---------------------------------------------------------------- one process, or N


def name_the_event_loop() -> None:
    """Tell sniffio, for this thread, that the event loop is asyncio.

    anyio asks sniffio which library runs the loop for every cancel scope, lock and event it
    makes (the revocation middleware's scope on every request, Starlette's own). Without a
    name set, sniffio finds out by calling `asyncio.current_task()` each time: with
    sse-starlette's response, which made several per stream and one per chunk, that was
    about a sixth of what a stream-mode run cost over a wait-mode one (py-spy). This thread
    runs only asyncio; worker threads keep their own (unset) thread-local and sniff as
    before."""
    try:
        import sniffio
    except ImportError:  # anyio then asks asyncio directly, which is as quick
        return
    sniffio.thread_local.name = "asyncio"


def build_server(settings: Settings, host: str | None, port: int | None) -> Any:
    """The uvicorn server of one `asr serve` process (the only one, or one of N workers):
    the app, its header-read timeout, its connection cap, and SIGTERM/SIGINT telling the app
    at once that the drain has begun."""
    import uvicorn

    from app.main import begin_shutdown, create_app

    app = create_app(settings)
    cap = connection_cap(settings)

    class Server(uvicorn.Server):
        """uvicorn, telling the app at once when SIGTERM/SIGINT starts the drain."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            begin_shutdown(app)
            super().handle_exit(sig, frame)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            name_the_event_loop()
            await super().startup(sockets=sockets)
            freeze_startup_objects()
            tune_young_collections(settings.gc_young_threshold)

    config = uvicorn.Config(
        app,
        host=host or settings.host,
        port=port if port is not None else settings.port,
        log_level=settings.log_level,
        log_config=None,  # configure_logging already routed uvicorn's loggers
        access_log=False,  # app.access logs each request with its route and tenant
        timeout_graceful_shutdown=settings.graceful_shutdown_seconds,
        # Explicit rather than "auto", so the header-read timeout and the eviction of slow
        # heads always apply.
        http=http_protocol(settings, cap),
        # Past the cap (and with no slow head left to close) a complete request head gets a
        # prompt 503 instead of more work.
        limit_concurrency=cap,
    )
    return Server(config)


def freeze_startup_objects() -> None:
    """Move what start-up built (modules, the app, its pools: about 190,000 objects) out of
    the garbage collector's sight, once it is serving.

    They live as long as the process, yet every full collection walked them all: a pause
    of 0.1-0.7 s here (measured), at random, in the middle of some request: the p99.
    Frozen, a full collection walks only what was made since. Done for `asr serve` only:
    a process that builds many apps (the tests) would keep each one's garbage for ever.
    """
    gc.collect()
    gc.freeze()


def tune_young_collections(threshold: int) -> None:
    """Collect the young generation every `threshold` new container objects, not Python's
    700 (`ASR_GC_YOUNG_THRESHOLD`; 0 leaves Python's setting).

    A run allocates thousands of containers (rows, events, frames, dicts), nearly all freed
    by reference counting, not by the collector; at 700 the collector still ran many times
    a run, and every tenth of its passes went on to an older generation. Done for `asr
    serve` only, as the freeze above is.
    """
    if threshold > 0:
        gc.set_threshold(threshold, *gc.get_threshold()[1:])


# A worker that exits with this code failed to start (uvicorn's STARTUP_FAILURE): starting it
# again would fail the same way, so the whole service stops instead of looping.
STARTUP_FAILURE = 3
# How long the supervisor waits for a worker beyond the graceful drain before killing it.
_STOP_MARGIN_SECONDS = 10.0


def worker_main(host: str | None, port: int | None, sockets: list[socket.socket]) -> None:
    """One worker process: its own settings (from the environment the supervisor prepared),
    logging, app, pool, bus listener, caches and sweeper, serving on the shared socket."""
    from app.logs import configure_logging

    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    build_server(settings, host, port).run(sockets=sockets)


class Workers:
    """`asr serve --workers N`: bind the socket once, run N worker processes on it, restart a
    worker that dies, and pass SIGTERM/SIGINT on so every worker drains as one process does.

    Each worker is a full replica, exactly as several `asr serve` processes on one database
    are: the run sweeper, lease renewals and idempotency-key expiry are fenced in the
    database and may run on every worker; each worker has its own LISTEN connection and its
    own caches (kept honest by the version checks every cached write makes). Two things that
    would differ per process are settled here, before the workers start: the default tenant
    is bootstrapped once, and an unset stream-token secret becomes one random secret that all
    workers share (else a token minted by one worker is refused by the next).
    """

    def __init__(self, settings: Settings, count: int, host: str | None, port: int | None) -> None:
        self.settings, self.count, self.host, self.port = settings, count, host, port
        self.stop = threading.Event()
        self.processes: list[Any] = []

    def run(self) -> int:
        import multiprocessing

        import uvicorn

        multiprocessing.allow_connection_pickling()  # sockets pass to spawned workers
        context = multiprocessing.get_context("spawn")
        config = uvicorn.Config(
            "app.main:create_app",
            host=self.host or self.settings.host,
            port=self.port if self.port is not None else self.settings.port,
        )
        sock = config.bind_socket()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.stop.set())

        def start() -> Any:
            process = context.Process(
                target=worker_main, args=(self.host, self.port, [sock]), name="asr-worker"
            )
            process.start()
            logger.info("started worker %s", process.pid)
            return process

        self.processes = [start() for _ in range(self.count)]
        code = 0
        try:
            while not self.stop.wait(0.5):
                for index, process in enumerate(self.processes):
                    if process.is_alive():
                        continue
                    if process.exitcode == STARTUP_FAILURE:
                        logger.error("worker %s failed to start: stopping", process.pid)
                        self.stop.set()
                        code = 1
                        break
                    logger.warning("worker %s exited (%s): starting another", process.pid,
                                   process.exitcode)  # fmt: skip
                    self.processes[index] = start()
        finally:
            self._stop_all()
            sock.close()
        return code

    def _stop_all(self) -> None:
        """SIGTERM to every worker (each drains: shutdown frames, runs finish or are
        interrupted), then wait for them, killing any that outlive the drain."""
        for process in self.processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.graceful_shutdown_seconds + _STOP_MARGIN_SECONDS
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                logger.warning("worker %s did not stop in time: killing it", process.pid)
                process.kill()
                process.join()


def prepare_workers(settings: Settings) -> str | None:
    """What the workers must share, settled once in the supervisor; returns a refusal.

    SQLite is refused: its one writer is a process-wide lock, so N processes would only
    queue on the file lock (and each one's in-process bus would hear the others by polling).
    """
    if settings.is_sqlite:
        return (
            "--workers > 1 needs PostgreSQL: SQLite has one writer, so more processes "
            "only wait on its lock. Run one worker, or set ASR_DATABASE_URL to PostgreSQL."
        )
    if settings.stream_token_secret is None:
        # Inherited by the spawned workers; other replicas still need the setting.
        os.environ["ASR_STREAM_TOKEN_SECRET"] = secrets.token_urlsafe(32)
        logger.warning(
            "ASR_STREAM_TOKEN_SECRET is unset: stream tokens work on this node's workers only"
        )
    return None
