"""The Python client's stream frames are typed (`asr_client.events`, generated from the
OpenAPI document): a recorded run stream (the TypeScript client's fixture, CRLF line ends as
the server writes them) read through `stream_run` gives one model per event type with its
typed payload, and the frames keep `event`, `data` and `id` as before. No server needed."""

from __future__ import annotations

from typing import assert_type

import httpx
from asr_client import DeltaFrame, Frame, SessionClient, events
from asr_client._core import typed_frame

from tests.conftest import ROOT

RECORDED = ROOT / "clients" / "typescript" / "test" / "fixtures" / "run-stream.sse"


def _client() -> SessionClient:
    body = RECORDED.read_bytes()

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=body)

    return SessionClient("http://asr.test", api_key="k", transport=httpx.MockTransport(answer))


def test_stream_run_yields_typed_frames() -> None:
    with _client() as asr:
        frames = list(asr.stream_run("s", "[words:3] héllo ✓"))
    assert [type(f).__name__ for f in frames] == [
        "RunStartedEvent", "UserInputEvent", "StepStartEvent", "ModelRequestEvent",
        "DeltaFrame", "DeltaFrame", "ModelResponseEvent", "MemoryItemsAppendedEvent",
        "StepEndEvent", "FinalOutputEvent", "AutoStopEvent", "RunFinishedEvent",
    ]  # fmt: skip
    last = frames[-1]
    assert isinstance(last, events.RunFinishedEvent)
    assert_type(last.payload, events.RunFinished)
    assert (last.payload.status, last.payload.stop_reason, last.payload.turns) == (
        "finished", "COMPLETED", 1,
    )  # fmt: skip
    started = frames[0]
    assert isinstance(started, events.RunStartedEvent)
    assert started.payload.limits.max_total_turns > 0
    # What callers read before: event, data (the JSON as a dict), id.
    assert (last.event, last.id, last.is_event) == ("RUN_FINISHED", "11", True)
    assert last.data["payload"]["stop_reason"] == "COMPLETED"
    assert last.data["run_id"] == last.run_id == started.run_id
    deltas = [f for f in frames if isinstance(f, DeltaFrame)]
    assert "".join(f.text or "" for f in deltas) == "word1 word2 word3"
    assert all(f.event == "delta" and f.id is None and not f.is_event for f in deltas)
    assert deltas[0].data["text"] == "word1"


def test_control_problem_and_unknown_frames() -> None:
    shutdown = typed_frame(
        "shutdown",
        {"resume_after": "7", "detail": "d", "reason": "server_shutdown", "reconnect": True,
         "last_seq": 7},
        None,
    )  # fmt: skip
    assert isinstance(shutdown, events.ShutdownFrame) and shutdown.last_seq == 7
    overflow = typed_frame("overflow", {"resume_after": "c", "detail": "d"}, None)
    assert type(overflow) is events.StreamEndFrame and overflow.resume_after == "c"
    problem = typed_frame(
        "ERROR", {"type": "about:blank", "title": "t", "status": 500, "code": "internal"}, None
    )
    assert isinstance(problem, events.ProblemFrame) and problem.code == "internal"
    # A newer server's event type, or a payload this client reads otherwise: a plain Frame.
    new = typed_frame("NEW_THING", {"type": "NEW_THING", "seq": 3}, "3")
    assert type(new) is Frame and (new.event, new.id, new.data["seq"]) == ("NEW_THING", "3", 3)
    odd = typed_frame("RUN_FINISHED", {"type": "RUN_FINISHED", "payload": "?"}, "4")
    assert type(odd) is Frame and odd.data["payload"] == "?"


def test_every_event_type_has_a_model() -> None:
    assert set(events.EVENT_MODELS) >= {"RUN_STARTED", "RUN_FINISHED", "TOOL_CALL", "ERROR"}
    for type_, model in events.EVENT_MODELS.items():
        assert model.model_fields["type"].annotation.__args__ == (type_,)  # type: ignore[union-attr]
