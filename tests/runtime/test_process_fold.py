"""Issue 10: process snapshots are part of the session state, folded from PROCESS_STARTED and
PROCESS_EXITED, kept across a restore, turned into history by a fork, and absent from the
state's JSON while a session has never had a process (older snapshots keep their shape)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.runtime.session.events import Event
from app.runtime.session.projector import fold
from app.runtime.session.state import SessionState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def events(*specs: tuple[str, dict[str, Any]]) -> list[Event]:
    return [
        Event(event_id=f"e{i}", session_id="s", seq=i, type=t, payload=p, created_at=T0)
        for i, (t, p) in enumerate(specs, start=1)
    ]


STARTED = ("PROCESS_STARTED", {"process_id": "p1", "pid": 42, "command": ["sleep", "30"]})
USER = ("USER_INPUT", {"item": {"type": "message", "role": "user", "content": "go"}})


def test_started_then_exited() -> None:
    state = fold(
        None,
        events(
            STARTED,
            USER,
            (
                "PROCESS_EXITED",
                {"process_id": "p1", "exit_code": 0, "reason": "exited", "output_bytes": 12},
            ),
        ),
    )
    p1 = state.processes["p1"]
    assert (p1["status"], p1["exit_code"], p1["output_bytes"]) == ("exited", 0, 12)
    assert (p1["started_seq"], p1["exited_seq"], p1["command"]) == (1, 3, ["sleep", "30"])
    assert state.memory_json()["items"] == [USER[1]["item"]]  # processes are not memory


def test_running_and_service_stopped() -> None:
    running = fold(None, events(STARTED))
    assert running.processes["p1"]["status"] == "running"
    stopped = fold(
        running,
        events(
            STARTED,
            ("PROCESS_EXITED", {"process_id": "p1", "exit_code": -15, "reason": "service_stopped"}),
        ),
    )
    assert stopped.processes["p1"]["status"] == "restored"
    assert running.processes["p1"]["status"] == "running"  # fold never mutates its input


def test_restore_keeps_processes_and_fork_turns_running_ones_into_history() -> None:
    restore = ("SESSION_RESTORED", {"state": {"memory": {"items": [], "summary": None}}})
    state = fold(None, events(STARTED, restore))
    assert state.processes["p1"]["status"] == "running"
    forked = fold(None, events(STARTED, ("SESSION_FORKED", {"parent_session_id": "x"})))
    assert (forked.processes["p1"]["status"], forked.processes["p1"]["reason"]) == (
        "restored",
        "forked",
    )


def test_state_json_round_trip_and_shape_without_processes() -> None:
    empty = fold(None, events(USER))
    assert "processes" not in empty.to_json()
    with_process = fold(None, events(STARTED))
    data = with_process.to_json()
    assert data["processes"]["p1"]["status"] == "running"
    assert SessionState.from_json(data) == with_process
    copy = with_process.copy()
    copy.processes["p1"]["status"] = "changed"
    assert with_process.processes["p1"]["status"] == "running"


def test_odd_payloads_never_crash_the_fold() -> None:
    state = fold(
        None,
        events(
            ("PROCESS_STARTED", {"command": ["make"]}),  # no id: skipped
            ("PROCESS_EXITED", {"process_id": "ghost", "exit_code": 1}),  # never started
            ("PROCESS_STARTED", {"process_id": "p2", "command": ["make"], "cwd": "/w"}),
        ),
    )
    assert sorted(state.processes) == ["ghost", "p2"]
    assert state.processes["ghost"]["status"] == "exited"
