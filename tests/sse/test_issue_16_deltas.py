"""Issue #16 (3): token deltas reach subscribers on every replica, and a subscriber that
(re)connects mid-turn gets the turn's text so far first, so a chat view never has a hole.

The run executes on server A. The subscriber is on A itself ("same", both databases) or on
server B ("other", PostgreSQL only: two `asr serve` on one database, deltas relayed by
NOTIFY). Before the fix, B's subscriber got no delta at all, and a reconnecting one got
only the deltas written after it came back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server, TenantKey
from tests.sse.conftest import (
    Frame,
    new_session,
    read_frames,
    start_sse_server,
    stop_and_check,
    wait_listening,
)

WORDS_200 = " ".join(f"word{i}" for i in range(1, 201))


@pytest.fixture(scope="module")
def replica_b(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server | None]:
    if not database_url.startswith("postgresql"):
        yield None  # SQLite: one process, the same-replica cases only
        return
    srv = start_sse_server(database_url, tmp_path_factory.mktemp("deltas"), "b")
    wait_listening(srv)  # deltas are relayed by NOTIFY only: none is caught up on
    yield srv
    stop_and_check(srv)


@pytest.fixture(params=["same", "other"])
async def subscriber(
    request: pytest.FixtureRequest,
    sse_server: Server,
    replica_b: Server | None,
    tenant: TenantKey,
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the replica the subscriber connects to."""
    if request.param == "other" and replica_b is None:
        pytest.skip("two replicas need PostgreSQL")
    target = sse_server if request.param == "same" else replica_b
    assert target is not None
    async with httpx.AsyncClient(
        base_url=target.base_url, headers=tenant.headers, timeout=httpx.Timeout(15, read=10)
    ) as client:
        yield client


class Reader:
    """A session stream with deltas: events and delta frames in arrival order."""

    def __init__(self, frames: AsyncIterator[Frame]) -> None:
        self.frames = frames
        self.deltas: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.arrivals: list[dict[str, Any]] = []  # both, in the order they came

    async def until(self, done: Any) -> None:
        async with asyncio.timeout(20):
            async for frame in self.frames:
                if frame.event == "delta":
                    self.deltas.append(frame.json)
                    self.arrivals.append(frame.json)
                elif frame.id is not None:
                    self.events.append(frame.json)
                    self.arrivals.append(frame.json)
                if done(self):
                    return

    def final(self) -> str:
        return next(e["payload"]["text"] for e in self.events if e["type"] == "FINAL_OUTPUT")


def finished(reader: Reader) -> bool:
    return any(e["type"] == "RUN_FINISHED" for e in reader.events)


def assert_contiguous(deltas: list[dict[str, Any]]) -> None:
    """Each frame starts where the text before it ended: nothing missing, nothing twice."""
    offset = deltas[0]["offset"]
    for delta in deltas:
        assert delta["offset"] == offset, deltas
        offset += len(delta["text"])


async def test_every_delta_of_a_run_reaches_the_subscriber(
    http: httpx.AsyncClient, subscriber: httpx.AsyncClient
) -> None:
    sid = await new_session(http)
    path = f"/v1/sessions/{sid}/events/stream"
    async with subscriber.stream("GET", path, params={"include": "deltas"}) as response:
        assert response.status_code == 200
        reader = Reader(read_frames(response))
        await reader.until(lambda r: r.events)  # SESSION_CREATED: subscribed
        run = await http.post(
            f"/v1/sessions/{sid}/runs", json={"input": "[words:200]", "mode": "background"}
        )
        assert run.status_code == 202, run.text
        await reader.until(finished)
    assert reader.final() == WORDS_200
    assert "".join(d["text"] for d in reader.deltas) == WORDS_200
    assert reader.deltas[0]["offset"] == 0
    assert_contiguous(reader.deltas)
    assert not any(d.get("catch_up") for d in reader.deltas)
    assert {d["run_id"] for d in reader.deltas} == {run.json()["run_id"]}
    # Every delta came after its turn's STEP_START and before the turn's MODEL_RESPONSE,
    # on this replica as on the one running the model.
    for turn_id in {d["turn_id"] for d in reader.deltas}:
        seen = [
            "delta" if a["type"] == "delta" else a["type"]
            for a in reader.arrivals
            if a.get("turn_id") == turn_id
            and a["type"] in ("delta", "STEP_START", "MODEL_RESPONSE")
        ]
        assert seen[0] == "STEP_START" and seen[-1] == "MODEL_RESPONSE", seen
        assert set(seen[1:-1]) == {"delta"}, seen


async def test_a_subscriber_reconnecting_mid_turn_gets_the_text_so_far_then_the_rest(
    http: httpx.AsyncClient, subscriber: httpx.AsyncClient
) -> None:
    sid = await new_session(http)
    path = f"/v1/sessions/{sid}/events/stream"
    # 200 words 15 ms apart: a turn of about 3 s, to leave and come back in the middle of.
    run = await http.post(
        f"/v1/sessions/{sid}/runs", json={"input": "[words:200][pace:15]", "mode": "background"}
    )
    assert run.status_code == 202, run.text
    async with subscriber.stream("GET", path, params={"include": "deltas"}) as response:
        first = Reader(read_frames(response))
        await first.until(lambda r: sum(len(d["text"]) for d in r.deltas) >= 100)
    seen = first.events[-1]["seq"]
    text_before = "".join(d["text"] for d in first.deltas)
    # It joined mid-turn (on the other replica, its first subscriber of the session: the
    # replica running the model hears of it only then), and has the text from its start.
    assert first.deltas[0]["offset"] == 0 and WORDS_200.startswith(text_before)
    assert_contiguous(first.deltas)
    # It joined mid-turn (on the other replica, its first subscriber of the session: the
    # replica running the model hears of it only then), and has the text from its start.
    assert first.deltas[0]["offset"] == 0 and WORDS_200.startswith(text_before)
    assert_contiguous(first.deltas)
    await asyncio.sleep(0.3)  # words written while away

    headers = {"Last-Event-ID": str(seen)}
    params = {"include": "deltas"}
    async with subscriber.stream("GET", path, params=params, headers=headers) as response:
        second = Reader(read_frames(response))
        await second.until(finished)
    catch_up, *rest = second.deltas
    assert catch_up.get("catch_up") is True and catch_up["offset"] == 0, catch_up
    assert catch_up["text"].startswith(text_before) and len(catch_up["text"]) > len(text_before)
    assert not any(d.get("catch_up") for d in rest)
    assert_contiguous(second.deltas)
    assert catch_up["text"] + "".join(d["text"] for d in rest) == second.final() == WORDS_200
    seqs = [e["seq"] for e in second.events]
    assert seqs == list(range(seen + 1, seen + 1 + len(seqs)))  # no event lost or repeated


async def test_a_subscriber_after_the_turn_gets_no_catch_up(
    http: httpx.AsyncClient, subscriber: httpx.AsyncClient
) -> None:
    sid = await new_session(http)
    run = await http.post(f"/v1/sessions/{sid}/runs", json={"input": "[words:20]", "mode": "wait"})
    assert run.status_code == 200 and run.json()["status"] == "finished", run.text
    path = f"/v1/sessions/{sid}/events/stream"
    async with subscriber.stream("GET", path, params={"include": "deltas"}) as response:
        reader = Reader(read_frames(response))
        await reader.until(finished)
    assert reader.deltas == []  # the text is in the ledger: FINAL_OUTPUT, once
    assert reader.final() == " ".join(f"word{i}" for i in range(1, 21))
