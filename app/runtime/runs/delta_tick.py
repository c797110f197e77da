"""A run's token deltas, gathered per writer tick before they leave the run.

A model streams in chunks of a word or less, and every chunk that left the run on its own
would cost a frame everywhere after it: the bus, the NOTIFY channel to the other replicas,
each subscriber's encode, and a socket write per stream. A frame is what costs, not a token,
so the run sends at most one frame per kind per tick (`interval`), and one more for the
first chunk after a quiet tick, which goes as soon as the model lets the event loop run
(`call_soon`): the first token waits for no timer, and the chunks a model hands over in one
burst (a provider's SDK parsing several events out of one read, a model that answers at
once) leave together. Later chunks join the text waiting for the tick's end. Redaction runs
on that joined text, once per frame rather than once per chunk, which also catches a secret
the model split across the chunks of one frame.

The end of a turn sends what waits at once (`flush`), so the turn's text is complete before
its events are written.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

Frame = dict[str, Any]


class DeltaTick:
    """The deltas of one run, sent through `send` at most once per `interval` seconds."""

    __slots__ = ("_interval", "_kind", "_parts", "_send", "_sent_at", "_template", "_timer")

    def __init__(self, send: Callable[[Frame], None], *, interval: float) -> None:
        self._send = send
        self._interval = interval
        self._sent_at = float("-inf")
        self._timer: asyncio.Handle | None = None
        # What waits: the text of one kind (`type` and turn) in parts, and its first frame.
        self._template: Frame | None = None
        self._kind: object = None
        self._parts: list[str] = []

    def add(self, frame: Frame) -> None:
        """A chunk from the model (`type` and `text`, and what else the run adds)."""
        text = frame.get("text")
        if not isinstance(text, str):
            self.flush()
            self._send(frame)
            return
        if not text:
            return
        kind = (frame.get("type"), frame.get("turn_id"))
        if self._parts and kind != self._kind:
            self._emit()  # another kind: what waits goes first, in order
        if not self._parts:
            self._template, self._kind = frame, kind
        self._parts.append(text)
        if self._timer is not None:
            return
        if self._interval <= 0:
            self.flush()
            return
        wait = self._sent_at + self._interval - time.monotonic()
        loop = asyncio.get_running_loop()
        if wait <= 0:  # a quiet tick: at the end of the model's burst, before any I/O
            self._timer = loop.call_soon(self.flush)
        else:
            self._timer = loop.call_later(wait, self.flush)

    def flush(self) -> None:
        """Send what waits now (the end of a turn, or the end of the tick)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._parts:
            self._emit()
            self._sent_at = time.monotonic()

    def _emit(self) -> None:
        assert self._template is not None
        text = self._parts[0] if len(self._parts) == 1 else "".join(self._parts)
        self._parts = []
        self._send({**self._template, "text": text})
