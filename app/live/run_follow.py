"""A run in stream mode is the session's live timeline narrowed to that run.

One live-delivery path: the run's events come through the bus (`replay_then_live`, its
bounded queue, its overflow and shutdown rules, the send timeout of `StreamResponse`) like
any timeline's, from RUN_STARTED to RUN_FINISHED, with the run's delta frames (the bus's
ephemeral frames, the ones a timeline subscriber with `include=deltas` gets). Whatever ends
the run (completion, failure, cancel on any replica, interrupt, lease loss) ends the stream
with the run's closing events, because the stream ends on RUN_FINISHED read from the bus,
never on a signal of the process that executes it.

The subscription is taken when the stream is asked for, before the route awaits anything
after the run's start: the run's task has not run yet, so no delta it publishes is missed
(its events are replayed from the table in any case).

The response that sends a run's timeline as Server-Sent Events is the API's
(`app.api.streams.run_response`), as is the AG-UI translation (`app.api.ag_ui.routes`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

from app.live.stream_response import StreamStop
from app.live.timeline import Batch, StreamEnd, replay_then_live, run_timeline
from app.runtime.ports import LiveDelivery, RunRecord
from app.runtime.session.events import Event
from app.runtime.session.service import SessionRuntime
from app.runtime.session.subscription import Subscription
from app.settings import Settings


class RunFollow:
    """One client's view of one run: its items, its stop switch, and its cleanup."""

    def __init__(
        self,
        streams: RunStreams,
        tenant_id: str,
        run: RunRecord,
        *,
        deltas: bool,
        after: int | None = None,
    ) -> None:
        self.tenant_id = tenant_id
        self.run = run
        self.stop = StreamStop()
        self._streams = streams
        self._deltas = deltas
        self._stack = ExitStack()
        self._sub: Subscription | None = None
        if after is not None:
            # A client joining mid-run (AG-UI connect, a resumed stream): the run's events
            # after a seq it already has (a snapshot as of that seq, or its Last-Event-ID).
            self._subscribe(after)
            self._after: int | None = after
            self._known: Sequence[Event] = ()
            self.first_ready = False
            self.items = self._items()
            return
        head = run.last_seq
        if head is None:  # queued: its events come after the session's head as it is now
            cached = streams.runtime.cached(tenant_id, run.session_id)
            head = cached.session.last_seq if cached is not None else None
        if head is not None:
            self._subscribe(head)
        self._after = (run.first_seq - 1) if run.first_seq else head
        # The start's events, when this process just committed them: not read back.
        self._known = streams.known(tenant_id, run) if self._sub is not None else ()
        # Then the stream's first batch is ready at once.
        self.first_ready = bool(self._known)
        self.items = self._items()

    def _subscribe(self, head: int) -> None:
        bus = self._streams.bus
        sub = self._stack.enter_context(
            bus.subscribe(self.tenant_id, self.run.session_id, head=head, deltas=self._deltas)
        )
        self.stop.watch(sub)
        self._sub = sub

    @contextmanager
    def _subscription(self) -> Iterator[Subscription]:
        assert self._sub is not None
        try:
            yield self._sub
        finally:
            self.close()

    def _items(self) -> AsyncGenerator[Batch | StreamEnd, None]:
        """The run's timeline itself when the subscription is taken (every frame passes
        each generator layer, so none is added), else one that takes it first."""
        return self._timeline() if self._sub is not None else self._subscribed_first()

    async def _subscribed_first(self) -> AsyncGenerator[Batch | StreamEnd, None]:
        head = (await self._streams.runtime.get(self.tenant_id, self.run.session_id)).last_seq
        self._subscribe(head)
        self._after = head
        timeline = self._timeline()
        try:
            async for item in timeline:
                yield item
        finally:
            await timeline.aclose()

    def _timeline(self) -> AsyncGenerator[Batch | StreamEnd, None]:
        runtime, run = self._streams.runtime, self.run
        batch = self._streams.settings.sse_replay_batch

        async def read_after(seq: int) -> list[Event]:
            return await runtime.list_events(
                self.tenant_id, run.session_id, after_seq=seq, run_id=run.run_id, limit=batch
            )

        return run_timeline(
            replay_then_live(
                self._subscription,
                read_after,
                after_seq=self._after or 0,
                types=None,
                batch=batch,
                known=self._known,
            ),
            run_id=run.run_id,
        )

    def close(self) -> None:
        """Unsubscribe; idempotent, and safe when the stream never started."""
        self._stack.close()


class RunStreams:
    """Stream-mode runs of this replica (`Services.run_streams`)."""

    def __init__(
        self,
        bus: LiveDelivery,
        runtime: SessionRuntime,
        settings: Settings,
        *,
        known: Callable[[str, RunRecord], Sequence[Event]] = lambda _tenant, _run: (),
    ) -> None:
        self.bus = bus
        self.runtime = runtime
        self.settings = settings
        # The events of a run's start this process committed (`RunManager.start_events`).
        self.known = known

    def follow(
        self, tenant_id: str, run: RunRecord, *, deltas: bool, after: int | None = None
    ) -> RunFollow:
        """Subscribe to the run now (call it before awaiting anything after its start).
        `after`: only the run's events above this seq of the session (a client that has
        the rest); `head` of the subscription, so it must be committed already."""
        return RunFollow(self, tenant_id, run, deltas=deltas, after=after)
