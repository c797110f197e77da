"""Token deltas for live subscribers on every replica, with a catch-up for late joiners.

Deltas are ephemeral: never in the ledger, so nothing can be read back from the table. The
relay therefore keeps, on every replica, the text of each session's turn in progress
(`TurnText`), built from the same messages its subscribers get:

- On the owner (the replica running the model) the chunks are coalesced per session: sent
  at once when nothing was sent for the session in the last `flush_seconds`, else at the
  end of that interval, so a session costs at most one message per interval however fast
  its model streams. A message is applied to the owner's own subscribers and, on
  PostgreSQL, sent to the other replicas as NOTIFYs (`delta_wire`, split under 8000 bytes:
  the owner applies the same pieces, so every replica sends the same frames).
- Every other replica applies the messages it hears in the same way.
- A new subscriber that wants deltas first gets one catch-up frame per kind with the
  turn's text so far (`catch_up: true`, `offset: 0`), then the live frames from where that
  text ends: applying a message and subscribing both happen without an await, so no frame
  falls between the two, nor comes twice.
- The owner ends a turn's text when its model call returns (`end_turn`): the rest of the
  text is sent at once, then an END message, and the turn's events are written only after
  these NOTIFYs were sent. Every replica thus hears all of a turn's deltas before its
  MODEL_RESPONSE, and drops the buffer on END, so a subscriber arriving after the text is
  final gets it from the ledger (FINAL_OUTPUT), never twice.

Every frame carries `offset` (code points of its kind's text before it), so a gap (a
notification lost while a listener reconnected) or a duplicate is visible; a replica that
missed the start of a turn's text keeps no catch-up for it. Buffers idle for
`idle_seconds` (an owner that died mid-turn) are dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from app.live.delta_wire import END, DeltaMessage, DeltaNotifier, split

log = logging.getLogger("app.live.deltas")

Key = tuple[str, str]  # (tenant_id, session_id)
# (tenant_id, session_id, frames, after_seq): see `DeltaMessage.after_seq`.
Deliver = Callable[[str, str, list[dict[str, Any]], int | None], None]
_SWEEP_EVERY = 10.0


@dataclass(slots=True)
class _Text:
    """One kind of a turn's text: complete from offset 0, or only known to end at `end`."""

    chunks: list[str] = field(default_factory=list)
    end: int = 0
    complete: bool = True


@dataclass(slots=True)
class TurnText:
    """The text so far of a session's turn in progress, per kind, as this replica saw it."""

    run_id: str | None
    turn_id: str | None
    origin: str
    texts: dict[str, _Text] = field(default_factory=dict)
    emitted_at: float = 0.0
    touched: float = field(default_factory=time.monotonic)
    gaps: int = 0

    def apply(self, message: DeltaMessage, max_chars: int) -> DeltaMessage | None:
        """Add the message's text; returns what is new in it (None: nothing is)."""
        text = self.texts.get(message.kind)
        if text is None:
            text = self.texts[message.kind] = _Text(end=message.offset)
            text.complete = message.offset == 0
        self.touched = time.monotonic()
        self.emitted_at = message.emitted_at
        if message.offset > text.end:  # a gap: what lay between is lost to this replica
            self.gaps += 1
            text.chunks.clear()
            text.complete = False
        elif message.offset < text.end:  # repeated text: keep only what is new
            skip = text.end - message.offset
            if skip >= len(message.text):
                return None
            message = _tail(message, skip)
        text.end = message.offset + len(message.text)
        if text.complete:
            text.chunks.append(message.text)
            if text.end > max_chars:  # too long to keep: no catch-up for this turn
                text.chunks.clear()
                text.complete = False
        return message

    def catch_up(self) -> list[dict[str, Any]]:
        """One frame per kind with the whole text so far (kinds that are complete)."""
        frames = []
        for kind, text in self.texts.items():
            if not text.complete or not text.end:
                continue
            whole = "".join(text.chunks)
            text.chunks[:] = [whole]
            message = DeltaMessage(
                self.origin, "", "", self.run_id, self.turn_id, kind, 0, self.emitted_at, whole
            )
            frames.append({**message.frame(), "catch_up": True})
        return frames


def _tail(message: DeltaMessage, skip: int) -> DeltaMessage:
    """The message without its first `skip` characters (already applied)."""
    return replace(message, offset=message.offset + skip, text=message.text[skip:])


@dataclass(slots=True)
class _Pending:
    """Text of one kind waiting in an outbox: its offset, when its first part came."""

    kind: str
    offset: int
    emitted_at: float
    parts: list[str]


@dataclass(slots=True)
class _Outbox:
    """The owner's chunks of one session's turn waiting for the next NOTIFY."""

    run_id: str | None
    turn_id: str | None
    offsets: dict[str, int] = field(default_factory=dict)
    pending: list[_Pending] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    sent_at: float = float("-inf")
    after_seq: int | None = None  # the session's last committed seq at the newest chunk


class DeltaRelay:
    """Applies delta messages to this replica's subscribers and keeps the turn texts.

    `deliver(tenant_id, session_id, frames)` hands frames to the session's local
    subscribers that asked for deltas. `notifier` (PostgreSQL) carries the owner's messages
    to the other replicas; without one (SQLite: one process) deltas stay local.
    """

    def __init__(
        self,
        deliver: Deliver,
        *,
        notifier: DeltaNotifier | None = None,
        flush_seconds: float = 0.025,
        idle_seconds: float = 120.0,
        max_turn_chars: int = 1_000_000,
        send_timeout: float = 2.0,
    ) -> None:
        self.origin = uuid.uuid4().hex[:12]
        self._deliver = deliver
        self._notifier = notifier
        self._flush = flush_seconds
        self._idle = idle_seconds
        self._max_chars = max_turn_chars
        self._send_timeout = send_timeout
        self._texts: dict[Key, TurnText] = {}
        self._outboxes: dict[Key, _Outbox] = {}
        self._swept = time.monotonic()
        self.counters = {"delta_messages": 0, "delta_gaps": 0, "delta_sends": 0}

    # ------------------------------------------------------------------ the owner

    def publish(
        self,
        tenant_id: str,
        session_id: str,
        frame: dict[str, Any],
        *,
        after_seq: int | None = None,
    ) -> None:
        """A chunk from this replica's model, for the session's subscribers on every replica.

        `after_seq` is the session's last committed seq as the run knows it: every replica
        passes the events up to it to its subscribers before this text.

        Sent at once when nothing went out for the session in the last `flush_seconds`,
        else with whatever else arrives until then: the same frames for this replica's
        subscribers as for the others' (a model streaming word by word costs a few frames
        per interval, not one per word, on every stream).
        """
        text = frame.get("text")
        kind = frame.get("type")
        if not isinstance(text, str) or not isinstance(kind, str) or not text or kind == END:
            return
        key = (tenant_id, session_id)
        run_id, turn_id = frame.get("run_id"), frame.get("turn_id")
        outbox = self._outboxes.get(key)
        if outbox is not None and (outbox.run_id, outbox.turn_id) != (run_id, turn_id):
            self._send(key)  # a new turn: the last one's rest goes first
            self._outboxes.pop(key, None)
            outbox = None
        if outbox is None:
            outbox = self._outboxes[key] = _Outbox(run_id, turn_id)
        if after_seq is not None:
            outbox.after_seq = max(after_seq, outbox.after_seq or after_seq)
        last = outbox.pending[-1] if outbox.pending else None
        if last is not None and last.kind == kind:  # coalesce with the waiting text
            last.parts.append(text)
        else:
            offset = outbox.offsets.get(kind, 0)
            outbox.pending.append(_Pending(kind, offset, time.time(), [text]))
        outbox.offsets[kind] = outbox.offsets.get(kind, 0) + len(text)
        if outbox.timer is None:
            wait = outbox.sent_at + self._flush - time.monotonic()
            if wait <= 0:
                self._send(key)
            else:
                outbox.timer = asyncio.get_running_loop().call_later(wait, self._send, key)

    async def end_turn(
        self, tenant_id: str, session_id: str, *, run_id: str | None, turn_id: str | None
    ) -> None:
        """The turn's text is final: send its rest and its END, and wait until they are
        sent, so that they reach every replica before the turn's events do."""
        key = (tenant_id, session_id)
        outbox = self._outboxes.get(key)
        if outbox is None or (outbox.run_id, outbox.turn_id) != (run_id, turn_id):
            return  # this turn streamed nothing here
        self._send(key)
        del self._outboxes[key]
        end = DeltaMessage(self.origin, tenant_id, session_id, run_id, turn_id, END, 0, time.time())
        self._apply(end)
        if self._notifier is not None:
            self._notifier.send([end])
            try:
                async with asyncio.timeout(self._send_timeout):
                    await self._notifier.flush()
            except TimeoutError:
                log.warning("delta messages of session %s still unsent", session_id)

    def _send(self, key: Key) -> None:
        outbox = self._outboxes.get(key)
        if outbox is None:
            return
        if outbox.timer is not None:
            outbox.timer.cancel()
            outbox.timer = None
        if not outbox.pending:
            return
        tenant_id, session_id = key
        messages = [
            piece
            for p in outbox.pending
            for piece in split(
                DeltaMessage(
                    self.origin,
                    tenant_id,
                    session_id,
                    outbox.run_id,
                    outbox.turn_id,
                    p.kind,
                    p.offset,
                    p.emitted_at,
                    "".join(p.parts),
                    outbox.after_seq,
                )
            )
        ]
        outbox.pending = []
        outbox.sent_at = time.monotonic()
        self.counters["delta_sends"] += 1
        for message in messages:  # the pieces other replicas get, so frames are the same
            self._apply(message)
        if self._notifier is not None:
            self._notifier.send(messages)

    # ------------------------------------------------------------- every replica

    def receive(self, message: DeltaMessage) -> None:
        """A message another replica sent (this replica's own were applied already)."""
        if message.origin != self.origin:
            self._apply(message)

    def _apply(self, message: DeltaMessage) -> None:
        self.counters["delta_messages"] += 1
        key = (message.tenant_id, message.session_id)
        text = self._texts.get(key)
        turn = (message.run_id, message.turn_id)
        if message.kind == END:
            if text is not None and (text.run_id, text.turn_id) == turn:
                del self._texts[key]
            return
        if text is None or (text.run_id, text.turn_id) != turn:
            text = self._texts[key] = TurnText(message.run_id, message.turn_id, message.origin)
        gaps = text.gaps
        new = text.apply(message, self._max_chars)
        self.counters["delta_gaps"] += text.gaps - gaps
        if new is not None:
            self._deliver(message.tenant_id, message.session_id, [new.frame()], new.after_seq)
        self._sweep()

    def catch_up(self, tenant_id: str, session_id: str) -> list[dict[str, Any]]:
        """The frames a new subscriber gets first: the turn's text so far, per kind."""
        text = self._texts.get((tenant_id, session_id))
        return [] if text is None else text.catch_up()

    def forget_remote(self) -> None:
        """Messages from other replicas may have been lost (the listener reconnected): their
        turns' texts can no longer be vouched for, so no catch-up is made from them."""
        for key in [k for k, t in self._texts.items() if t.origin != self.origin]:
            del self._texts[key]

    def _sweep(self) -> None:
        now = time.monotonic()
        if now - self._swept < _SWEEP_EVERY:
            return
        self._swept = now
        for key in [k for k, t in self._texts.items() if now - t.touched > self._idle]:
            del self._texts[key]
        for key, outbox in list(self._outboxes.items()):
            text = self._texts.get(key)
            if text is None and outbox.timer is None and not outbox.pending:
                del self._outboxes[key]

    def stats(self) -> dict[str, Any]:
        return {**self.counters, "delta_turns": len(self._texts)}
