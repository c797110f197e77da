"""Token deltas for live subscribers on every replica, with a catch-up for late joiners.

Deltas are ephemeral: never in the ledger, so nothing can be read back from the table. The
relay therefore keeps, on every replica, the text of each session's turn in progress
(`TurnText`), built from the same messages its subscribers get:

- On the owner (the replica running the model) each chunk the run publishes is one
  message: the run has coalesced its model's chunks per writer tick already
  (`app.runtime.runs.delta_tick`), so a session costs at most one message per tick however
  fast its model streams. A message is applied to the owner's own subscribers and, on
  PostgreSQL, sent to the other replicas as NOTIFYs (`delta_wire`, split under 8000 bytes:
  the owner applies the same pieces, so every replica sends the same frames).
- Every other replica applies the messages it hears in the same way.
- A new subscriber that wants deltas first gets one catch-up frame per kind with the
  turn's text so far (`catch_up: true`, `offset: 0`), then the live frames from where that
  text ends: applying a message and subscribing both happen without an await, so no frame
  falls between the two, nor comes twice.
- The owner ends a turn's text when its model call returns (`end_turn`): an END message
  follows its text, and the turn's events are written only after these NOTIFYs were sent.
  Every replica thus hears all of a turn's deltas before its MODEL_RESPONSE, and drops the
  buffer on END, so a subscriber arriving after the text is final gets it from the ledger
  (FINAL_OUTPUT), never twice.

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

from app.live.delta_wire import END, DeltaMessage, DeltaNotifier, split_encoded

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

    def wholes(self) -> list[tuple[str, str]]:
        """(kind, whole text so far) of each kind that is complete from offset 0."""
        found = []
        for kind, text in self.texts.items():
            if not text.complete or not text.end:
                continue  # too long to keep, or begun elsewhere: no whole to give
            whole = "".join(text.chunks)
            text.chunks[:] = [whole]
            found.append((kind, whole))
        return found

    def catch_up(self) -> list[dict[str, Any]]:
        """One frame per kind with the whole text so far (kinds that are complete)."""
        return [
            {
                **DeltaMessage(
                    self.origin, "", "", self.run_id, self.turn_id, kind, 0, self.emitted_at, whole
                ).frame(),
                "catch_up": True,
            }
            for kind, whole in self.wholes()
        ]


def _tail(message: DeltaMessage, skip: int) -> DeltaMessage:
    """The message without its first `skip` characters (already applied)."""
    return replace(message, offset=message.offset + skip, text=message.text[skip:])


@dataclass(slots=True)
class _Outbox:
    """Where the owner's text of one session's turn has got to, per kind."""

    run_id: str | None
    turn_id: str | None
    offsets: dict[str, int] = field(default_factory=dict)
    after_seq: int | None = None  # the session's last committed seq at the newest chunk
    sent: bool = False  # whether any of the turn's text went to other replicas


class DeltaRelay:
    """Applies delta messages to this replica's subscribers and keeps the turn texts.

    `deliver(tenant_id, session_id, frames)` hands frames to the session's local
    subscribers that asked for deltas. `notifier` (PostgreSQL) carries the owner's messages
    to the other replicas; without one (SQLite: one process) deltas stay local. `wanted`
    (`app.live.interest`) says whether another replica listens to a session: a session
    nobody else listens to sends nothing (None: every session sends).
    """

    def __init__(
        self,
        deliver: Deliver,
        *,
        notifier: DeltaNotifier | None = None,
        idle_seconds: float = 120.0,
        max_turn_chars: int = 1_000_000,
        send_timeout: float = 2.0,
    ) -> None:
        self.origin = uuid.uuid4().hex[:12]
        self._deliver = deliver
        self._notifier = notifier
        self._idle = idle_seconds
        self._max_chars = max_turn_chars
        self._send_timeout = send_timeout
        self._texts: dict[Key, TurnText] = {}
        self._outboxes: dict[Key, _Outbox] = {}
        self._swept = time.monotonic()
        self.wanted: Callable[[str, str], bool] | None = None
        self.counters = {
            "delta_messages": 0, "delta_gaps": 0, "delta_sends": 0, "delta_catch_ups_sent": 0
        }  # fmt: skip

    # ------------------------------------------------------------------ the owner

    def publish(
        self,
        tenant_id: str,
        session_id: str,
        frame: dict[str, Any],
        *,
        after_seq: int | None = None,
    ) -> None:
        """A chunk from this replica's run, for the session's subscribers on every replica:
        the same frames for this replica's subscribers as for the others'.

        `after_seq` is the session's last committed seq as the run knows it: every replica
        passes the events up to it to its subscribers before this text.
        """
        text = frame.get("text")
        kind = frame.get("type")
        if not isinstance(text, str) or not isinstance(kind, str) or not text or kind == END:
            return
        key = (tenant_id, session_id)
        run_id, turn_id = frame.get("run_id"), frame.get("turn_id")
        outbox = self._outboxes.get(key)
        if outbox is None or (outbox.run_id, outbox.turn_id) != (run_id, turn_id):
            outbox = self._outboxes[key] = _Outbox(run_id, turn_id)
        if after_seq is not None:
            outbox.after_seq = max(after_seq, outbox.after_seq or after_seq)
        offset = outbox.offsets.get(kind, 0)
        outbox.offsets[kind] = offset + len(text)
        message = DeltaMessage(
            self.origin, tenant_id, session_id, run_id, turn_id, kind, offset, time.time(),
            text, outbox.after_seq,
        )  # fmt: skip
        self.counters["delta_sends"] += 1
        if self._notifier is None or (self.wanted is not None and not self.wanted(*key)):
            self._apply(message)  # nobody else hears it: no payload to encode
            return
        pieces = split_encoded(message)
        for piece, _ in pieces:  # the pieces other replicas get, so frames are the same
            self._apply(piece)
        outbox.sent = True
        self._notifier.send_encoded([payload for _, payload in pieces])

    async def end_turn(
        self, tenant_id: str, session_id: str, *, run_id: str | None, turn_id: str | None
    ) -> None:
        """The turn's text is final: send its END, and wait until what the turn sent is
        sent, so that it reaches every replica before the turn's events do."""
        key = (tenant_id, session_id)
        outbox = self._outboxes.get(key)
        if outbox is None or (outbox.run_id, outbox.turn_id) != (run_id, turn_id):
            return  # this turn streamed nothing here
        del self._outboxes[key]
        end = DeltaMessage(self.origin, tenant_id, session_id, run_id, turn_id, END, 0, time.time())
        self._apply(end)
        # Whoever has heard any of the turn's text hears its end, listening now or not.
        wanted = self.wanted is None or outbox.sent or self.wanted(*key)
        if self._notifier is not None and wanted:
            self._notifier.send([end])
            try:
                async with asyncio.timeout(self._send_timeout):
                    await self._notifier.flush()
            except TimeoutError:
                log.warning("delta messages of session %s still unsent", session_id)

    def catch_up_remote(self, tenant_id: str, session_id: str) -> None:
        """Another replica started listening to the session: send it the text so far of
        the turn this replica runs there (offset 0; a replica that has part of it keeps
        only what is new), so that the live messages after it leave no hole."""
        key = (tenant_id, session_id)
        outbox = self._outboxes.get(key)
        text = self._texts.get(key)
        if self._notifier is None or outbox is None or text is None:
            return
        if (text.run_id, text.turn_id) != (outbox.run_id, outbox.turn_id):
            return
        payloads: list[str] = []
        for kind, whole in text.wholes():  # a kind too long to keep: it starts mid-text there
            message = DeltaMessage(
                self.origin, tenant_id, session_id, outbox.run_id, outbox.turn_id, kind, 0,
                text.emitted_at, whole, outbox.after_seq,
            )  # fmt: skip
            payloads += [payload for _, payload in split_encoded(message)]
        if payloads:
            outbox.sent = True
            self.counters["delta_catch_ups_sent"] += 1
            self._notifier.send_encoded(payloads)

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
        for key in [k for k in self._outboxes if k not in self._texts]:
            del self._outboxes[key]

    def stats(self) -> dict[str, Any]:
        return {**self.counters, "delta_turns": len(self._texts)}
