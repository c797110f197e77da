"""Token deltas between replicas: the message, its NOTIFY payloads, and their sender.

A delta message is a piece of one turn's text of one kind (`delta`, `reasoning_delta`) at
an offset (code points of that kind's text before it), or the end of the turn's text
(`END`). Offsets make order and gaps visible to every receiver, so a lost or reordered
notification can never splice text silently.

A message also names the session's last committed seq when its text was produced
(`after_seq`: the turn's opening events, STEP_START among them, are at or below it), so a
replica that has not yet passed those events to its subscribers holds the text back until
it has (`app.live.bus`): a timeline on any replica shows a turn's start before its text.

A payload is a JSON array, `[2, origin, tenant, session, run, turn, kind, offset,
emitted_at, text, after_seq]` (2: the format's version; version 1, without `after_seq`, is
still read), at most `MAX_PAYLOAD_BYTES`: PostgreSQL
refuses a NOTIFY payload of 8000 bytes or more, so long text is split into several messages
with consecutive offsets (`split`). JSON is ASCII-escaped, so a payload is valid in any
server encoding and its size is known before it is sent.

`DeltaNotifier` sends messages in the order given, one statement at a time: NOTIFYs of one
transaction are delivered in order, and transactions in commit order, so every replica
receives a session's messages in the order its owner produced them. The messages that
wait while a send is in flight go in the next one, packed into as few NOTIFYs as fit (`pack`:
a JSON array of payloads, still under `MAX_PAYLOAD_BYTES`): with many runs streaming, one
NOTIFY per message was a notification for every replica to parse, per run and per writer
tick. Sends are at least `min_interval` apart, as the wake-ups' are: with a hundred runs
streaming, sending whatever waited the moment the last send returned made packs of one or
two messages and a transaction per tick of every run.
The end of a turn does not wait out the interval (`flush` sends at once): its events wait
for its text, and a timer there would add to every run's latency. A
replica of a version that reads only single payloads ignores a pack (its subscribers then
miss that text live; the turn's events carry it).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app.store.announce import NOTIFY_INTERVAL, PACK_BYTES, PacedChannel, ascii_json

log = logging.getLogger("app.live.deltas")

DELTA_CHANNEL = "asr_deltas"
MAX_PAYLOAD_BYTES = PACK_BYTES  # PostgreSQL refuses 8000 and more
END = "END"  # the kind of the message that ends a turn's text
_VERSION = 2


@dataclass(frozen=True, slots=True)
class DeltaMessage:
    """A piece of a turn's text (or its end), as every replica applies it."""

    origin: str  # the replica whose model produced it
    tenant_id: str
    session_id: str
    run_id: str | None
    turn_id: str | None
    kind: str  # the frame type ("delta", "reasoning_delta") or END
    offset: int  # code points of this kind's text before `text`
    emitted_at: float  # unix seconds: when the owner's model produced the first of `text`
    text: str = ""
    after_seq: int | None = None  # the session's last committed seq when it was produced

    def frame(self) -> dict[str, Any]:
        """The SSE frame's data, as subscribers receive it (clients append `text`)."""
        frame: dict[str, Any] = {"type": self.kind, "text": self.text}
        if self.run_id is not None:
            frame["run_id"] = self.run_id
        if self.turn_id is not None:
            frame["turn_id"] = self.turn_id
        frame["offset"] = self.offset
        frame["emitted_at"] = round(self.emitted_at, 6)
        return frame


def encode(message: DeltaMessage) -> str:
    """The payload: by orjson when that is ASCII already (every frame of every streaming
    run passes here, and orjson is many times faster), else ASCII-escaped by `json`."""
    m = message
    fields = [_VERSION, m.origin, m.tenant_id, m.session_id, m.run_id, m.turn_id, m.kind]
    fields += [m.offset, round(m.emitted_at, 6), m.text, m.after_seq]
    return ascii_json(fields)


def decode(payload: str) -> DeltaMessage | None:
    """The message in a payload, or None for one that is not (or no longer) ours."""
    try:
        return decode_fields(json.loads(payload))
    except ValueError:
        return None


def decode_fields(fields: Any) -> DeltaMessage | None:
    """The message of a payload's decoded JSON array, or None for one that is not ours."""
    try:
        version = fields[0]
        after_seq = None
        if version == _VERSION:
            *fields, after_seq = fields
        elif version != 1:  # 1: a replica not yet upgraded, without after_seq
            return None
        _, origin, tenant, session, run, turn, kind, offset, at, text = fields
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    if not isinstance(text, str) or not isinstance(offset, int):
        return None
    if after_seq is not None and not isinstance(after_seq, int):
        return None
    return DeltaMessage(
        origin, tenant, session, run, turn, kind, offset, float(at), text, after_seq
    )


def decode_all(payload: str) -> list[DeltaMessage]:
    """The messages of a payload: one, or a `pack` of them (those that are ours)."""
    if not payload.startswith("[["):
        message = decode(payload)
        return [] if message is None else [message]
    try:
        parts = json.loads(payload)
    except ValueError:
        return []
    found = [decode_fields(part) for part in parts if isinstance(part, list)]
    return [message for message in found if message is not None]


def sent_by(payload: str, origin: str) -> bool:
    """Whether a payload is one `origin` sent (the owner hears its own NOTIFYs too, and has
    applied them already): told from its first bytes, without decoding it. A pack holds
    the messages of one replica only."""
    mine = f'[{_VERSION},"{origin}"'
    return payload.startswith(mine) or payload.startswith(mine, 1)


def split(message: DeltaMessage, limit: int = MAX_PAYLOAD_BYTES) -> list[DeltaMessage]:
    """The message as pieces whose payloads fit in `limit` bytes, offsets consecutive."""
    return [piece for piece, _ in split_encoded(message, limit)]


def split_encoded(
    message: DeltaMessage, limit: int = MAX_PAYLOAD_BYTES
) -> list[tuple[DeltaMessage, str]]:
    """The pieces of `split` with their payloads: a message is encoded once, for every
    replica, however many subscribers apply it.

    A piece is first sized at one byte a character and shrunk in proportion to what its
    payload really took (escapes take up to 12 bytes a character), so a long text costs a
    few encodings, not one per character. Ids so long that not even one character fits
    give no piece (the text then stays on its own replica, and is logged).
    """
    whole = encode(message)
    if len(whole) <= limit:  # ASCII: characters are bytes
        return [(message, whole)]
    header = len(encode(replace(message, text="")))
    room = limit - header
    if room < 12:
        log.warning("delta of session %s not relayed: its ids fill a NOTIFY", message.session_id)
        return []
    pieces: list[tuple[DeltaMessage, str]] = []
    text, offset, start = message.text, message.offset, 0
    while start < len(text):
        size = min(room, len(text) - start)
        while True:
            piece = replace(message, offset=offset + start, text=text[start : start + size])
            payload = encode(piece)
            if len(payload) <= limit:
                break
            size = max(1, min(size - 1, size * room // (len(payload) - header)))
        pieces.append((piece, payload))
        start += size
    return pieces


class DeltaNotifier(PacedChannel):
    """Sends delta messages as NOTIFYs on `DELTA_CHANNEL`, in order, one send at a time,
    those that waited for it packed."""

    def __init__(
        self, engine: AsyncEngine, *, in_transaction: bool, min_interval: float = NOTIFY_INTERVAL
    ) -> None:
        super().__init__(
            engine, DELTA_CHANNEL, in_transaction=in_transaction, min_interval=min_interval
        )

    def send(self, messages: list[DeltaMessage]) -> None:
        """Queue messages that fit a payload (`split`) for sending, in order."""
        self.send_encoded([encode(message) for message in messages])
