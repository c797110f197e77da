"""Issue #22: the AG-UI translator on plain event lists (no server): reasoning, text that
came without deltas, tool results, cancelled and failed runs, all in protocol order."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.api.ag_ui.stream import Translator
from app.runtime.session.events import Event


def event(seq: int, kind: str, payload: dict[str, Any], turn_id: str | None = "t1") -> Event:
    return Event(
        event_id=f"e{seq}",
        session_id="s",
        seq=seq,
        type=kind,
        payload=payload,
        created_at=datetime.now(UTC),
        run_id="run_x",
        turn_id=turn_id,
    )


def dumped(items: list[Any]) -> list[dict[str, Any]]:
    return [i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in items]


def translate(steps: list[Event | dict[str, Any]]) -> list[dict[str, Any]]:
    t = Translator(thread_id="th", run_id="r1")
    out = t.start("run_x", "s")
    for step in steps:
        out += t.delta(step) if isinstance(step, dict) else t.event(step)
    return dumped(out)


def response(seq: int, text: str, calls: list[dict[str, str]] | None = None) -> Event:
    payload = {"text": text, "tool_calls": calls or [], "usage": {}, "finish_reason": "stop"}
    return event(seq, "MODEL_RESPONSE", payload)


def finished(seq: int, status: str, stop: str | None) -> Event:
    return event(seq, "RUN_FINISHED", {"status": status, "stop_reason": stop}, turn_id=None)


def test_reasoning_then_text_close_in_order() -> None:
    out = translate(
        [
            event(1, "STEP_START", {"turn": 1}),
            {"type": "reasoning_delta", "text": "hmm", "turn_id": "t1"},
            {"type": "delta", "text": "hi", "turn_id": "t1"},
            response(2, "hi"),
            event(3, "FINAL_OUTPUT", {"text": "hi"}),
            event(4, "STEP_END", {"turn": 1}),
            finished(5, "finished", "COMPLETED"),
        ]
    )
    assert [e["type"] for e in out] == [
        "RUN_STARTED",
        "STEP_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    assert out[-1]["result"] == "hi" and out[-1]["outcome"] == {"type": "success"}


def test_text_without_deltas_comes_whole_from_the_model_response() -> None:
    out = translate([event(1, "STEP_START", {"turn": 1}), response(2, "whole answer")])
    content = [e for e in out if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert [c["delta"] for c in content] == ["whole answer"]
    assert [e["type"] for e in out][-1] == "TEXT_MESSAGE_END"


def test_server_tool_call_and_result() -> None:
    call = {"call_id": "c1", "name": "echo", "arguments": '{"text": "x"}'}
    result = {"call_id": "c1", "is_error": False, "item": {"output": "x"}}
    out = translate([response(1, "", [call]), event(2, "TOOL_RESULT", result)])
    assert [e["type"] for e in out[1:]] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    assert out[-1]["toolCallId"] == "c1" and out[-1]["content"] == "x"


def test_an_interrupted_run_is_cancelled_and_open_parts_are_closed() -> None:
    out = translate(
        [
            event(1, "STEP_START", {"turn": 1}),
            {"type": "delta", "text": "par", "turn_id": "t1"},
            finished(2, "interrupted", "INTERRUPTED"),
        ]
    )
    assert [e["type"] for e in out][-3:] == ["TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_FINISHED"]
    assert out[-1]["outcome"] == {"type": "cancelled"}


def test_a_failed_run_is_run_error_with_the_ledger_code() -> None:
    out = translate(
        [
            event(1, "ERROR", {"code": "model_error", "detail": "boom"}),
            finished(2, "failed", None),
        ]
    )
    assert out[-1] == {"type": "RUN_ERROR", "message": "boom", "code": "model_error"}
