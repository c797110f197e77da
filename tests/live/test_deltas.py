"""The delta relay (app/live/delta_relay.py), its NOTIFY payloads (app/live/delta_wire.py),
and the run's writer tick that feeds it (app/runtime/runs/delta_tick.py).

Pure: a relay delivers to a list, and "another replica" is a second relay fed the first
one's messages, as the LISTEN connection would feed them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.live.delta_relay import DeltaRelay
from app.live.delta_wire import (
    END,
    MAX_PAYLOAD_BYTES,
    DeltaMessage,
    decode,
    decode_all,
    encode,
    sent_by,
    split,
)
from app.runtime.runs.delta_tick import DeltaTick
from app.store.announce import pack

T, S = "tenant", "session"


class Sink:
    """What the relay delivered to local subscribers, and what it would NOTIFY."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.sent: list[DeltaMessage] = []

    def deliver(
        self, _tenant: str, _session: str, frames: list[dict[str, Any]], _after: int | None
    ) -> None:
        self.frames.extend(frames)

    # the DeltaNotifier's interface
    def send(self, messages: list[DeltaMessage]) -> None:
        self.send_encoded([encode(m) for m in messages])

    def send_encoded(self, payloads: list[str]) -> None:
        assert all(len(p.encode()) <= MAX_PAYLOAD_BYTES for p in payloads)
        messages = [decode(p) for p in payloads]
        assert all(m is not None for m in messages)
        self.sent.extend(m for m in messages if m is not None)

    async def flush(self) -> None:
        return None


def frame(text: str, turn: str = "r.t1", kind: str = "delta") -> dict[str, Any]:
    return {"type": kind, "text": text, "run_id": "r", "turn_id": turn}


def test_payloads_fit_notify_and_split_long_text_with_consecutive_offsets() -> None:
    text = "é" * 3000 + '"\\\n' * 2000 + "😀" * 1000 + "\x01" * 500 + "plain " * 2000
    message = DeltaMessage("o", T, S, "r", "r.t1", "delta", 7, 1.5, text)
    pieces = split(message)
    assert len(pieces) > 1
    assert all(len(encode(p).encode()) <= MAX_PAYLOAD_BYTES for p in pieces)
    assert "".join(p.text for p in pieces) == text
    offsets = [p.offset for p in pieces]
    assert offsets == [7 + sum(len(p.text) for p in pieces[:i]) for i in range(len(pieces))]
    assert [decode(encode(p)) for p in pieces] == pieces
    assert decode("T:S:3") is None and decode('[2,"o"]') is None
    assert decode('{"a": 1}') is None and decode("[3]") is None


def test_messages_carry_the_seq_they_follow_and_version_1_is_still_read() -> None:
    message = DeltaMessage("o", T, S, "r", "r.t1", "delta", 0, 1.5, "hi", 42)
    assert decode(encode(message)) == message
    old = '[1,"o","tenant","session","r","r.t1","delta",0,1.5,"hi"]'  # a replica not upgraded
    assert decode(old) == DeltaMessage("o", T, S, "r", "r.t1", "delta", 0, 1.5, "hi")
    assert decode('[2,"o","tenant","session","r","r.t1","delta",0,1.5,"hi","x"]') is None


async def test_every_replica_gets_the_owners_frames_in_order() -> None:
    owner_sink, remote_sink = Sink(), Sink()
    owner = DeltaRelay(owner_sink.deliver, notifier=owner_sink)  # type: ignore[arg-type]
    remote = DeltaRelay(remote_sink.deliver)
    words = [f"w{i} " for i in range(100)] + ["é" * 5000]  # the last one needs splitting
    for word in words:
        owner.publish(T, S, frame(word))
    await owner.end_turn(T, S, run_id="r", turn_id="r.t1")
    assert owner_sink.sent[-1].kind == END
    for message in owner_sink.sent:
        remote.receive(message)
    # One message per chunk the run published, the long one split under the NOTIFY limit.
    assert len(owner_sink.frames) == len(owner_sink.sent) - 1 > len(words)
    assert owner_sink.frames == remote_sink.frames
    assert "".join(f["text"] for f in remote_sink.frames) == "".join(words)
    assert remote.catch_up(T, S) == [] and owner.catch_up(T, S) == []  # the turn ended


def test_a_late_subscriber_gets_one_catch_up_then_the_rest() -> None:
    sink = Sink()
    relay = DeltaRelay(sink.deliver)
    relay.publish(T, S, frame("Hello"))
    relay.publish(T, S, frame(", world"))
    relay.publish(T, S, frame("thinking", kind="reasoning_delta"))
    caught = relay.catch_up(T, S)
    assert [(f["type"], f["text"], f["offset"], f["catch_up"]) for f in caught] == [
        ("delta", "Hello, world", 0, True),
        ("reasoning_delta", "thinking", 0, True),
    ]
    relay.publish(T, S, frame("!"))
    assert sink.frames[-1]["offset"] == len("Hello, world")
    relay.publish(T, S, frame("Next", turn="r.t2"))  # a new turn replaces the old text
    assert [f["text"] for f in relay.catch_up(T, S)] == ["Next"]


def test_gaps_and_repeats_are_visible_and_never_spliced() -> None:
    sink = Sink()
    relay = DeltaRelay(sink.deliver)

    def msg(offset: int, text: str) -> DeltaMessage:
        return DeltaMessage("other", T, S, "r", "r.t1", "delta", offset, 1.0, text)

    relay.receive(msg(0, "abc"))
    relay.receive(msg(1, "bcde"))  # overlaps: only "de" is new
    relay.receive(msg(0, "ab"))  # nothing new
    assert [(f["offset"], f["text"]) for f in sink.frames] == [(0, "abc"), (3, "de")]
    relay.receive(msg(9, "xyz"))  # 5..8 were lost
    assert relay.stats()["delta_gaps"] == 1
    assert relay.catch_up(T, S) == []  # no catch-up with a hole in it
    joined = DeltaRelay(Sink().deliver)
    joined.receive(msg(4, "late"))  # heard from the middle of a turn: no catch-up either
    assert joined.catch_up(T, S) == []


def test_a_reconnected_listener_forgets_other_replicas_turns() -> None:
    relay = DeltaRelay(Sink().deliver)
    relay.receive(DeltaMessage("other", T, S, "r", "r.t1", "delta", 0, 1.0, "abc"))
    relay.publish(T, "mine", frame("own"))
    relay.forget_remote()
    assert relay.catch_up(T, S) == []
    assert [f["text"] for f in relay.catch_up(T, "mine")] == ["own"]


async def test_a_burst_costs_one_frame_and_text_after_a_pause_waits_for_no_timer() -> None:
    sent: list[dict[str, Any]] = []
    tick = DeltaTick(sent.append, interval=0.02)
    for i in range(20):  # a burst, no await in between: all of it goes once the model yields
        tick.add(frame(f"{i} "))
    assert sent == []
    await asyncio.sleep(0)
    assert [f["text"] for f in sent] == ["".join(f"{i} " for i in range(20))]
    tick.add(frame("within the tick"))  # waits for the tick's end
    await asyncio.sleep(0)
    assert len(sent) == 1
    await asyncio.sleep(0.05)
    assert sent[-1]["text"] == "within the tick"
    await asyncio.sleep(0.05)
    tick.add(frame("after a pause"))  # nothing went out in the last tick: one loop turn
    await asyncio.sleep(0)
    assert sent[-1]["text"] == "after a pause" and sent[-1]["turn_id"] == "r.t1"


async def test_the_tick_keeps_kinds_in_order_and_sends_the_rest_at_the_end_of_a_turn() -> None:
    sent: list[dict[str, Any]] = []
    tick = DeltaTick(sent.append, interval=60)
    tick.add(frame("think", kind="reasoning_delta"))  # the first of the run: no timer
    tick.add(frame("ing", kind="reasoning_delta"))
    await asyncio.sleep(0)
    tick.add(frame("", kind="reasoning_delta"))  # nothing to send
    tick.add(frame("Hel"))  # within the tick: waits
    tick.add(frame("lo"))
    tick.add(frame("next", turn="r.t2"))  # another turn is another kind of text
    assert [(f["type"], f["text"]) for f in sent] == [
        ("reasoning_delta", "thinking"),
        ("delta", "Hello"),
    ]
    tick.flush()  # the end of the turn: no waiting for the tick
    assert (sent[-1]["text"], sent[-1]["turn_id"]) == ("next", "r.t2")
    tick.flush()
    assert len(sent) == 3


def test_a_tick_of_zero_sends_every_chunk() -> None:
    sent: list[dict[str, Any]] = []
    tick = DeltaTick(sent.append, interval=0)
    for word in ("a", "b", "c"):
        tick.add(frame(word))
    assert [f["text"] for f in sent] == ["a", "b", "c"]


def test_a_replica_knows_its_own_payloads_without_decoding_them() -> None:
    mine = encode(DeltaMessage("me", T, S, "r", "r.t1", "delta", 0, 1.0, "hi"))
    theirs = encode(DeltaMessage("meh", T, S, "r", "r.t1", "delta", 0, 1.0, "hi"))
    assert sent_by(mine, "me") and not sent_by(theirs, "me") and sent_by(theirs, "meh")


def test_waiting_messages_go_packed_in_order_under_the_notify_limit() -> None:
    messages = [
        DeltaMessage("me", T, S, "r", "r.t1", "delta", i * 300, 1.0, "é" * 300, 9)
        for i in range(100)
    ]
    payloads = pack([encode(m) for m in messages])
    assert 1 < len(payloads) < len(messages)
    assert all(len(p.encode()) <= MAX_PAYLOAD_BYTES for p in payloads)
    assert [m for p in payloads for m in decode_all(p)] == messages
    assert all(sent_by(p, "me") and not sent_by(p, "m") for p in payloads)
    one = encode(messages[0])
    assert pack([one]) == [one] and decode_all(one) == [messages[0]]  # alone: as it was
    assert decode_all("[[") == [] and decode_all('[[3],"x",[2]]') == []
