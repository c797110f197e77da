"""Issue #19 (3): the token estimate's calibration is folded from MODEL_RESPONSE events,
kept in the state (and its JSON only once learnt), and used by the context projection."""

from __future__ import annotations

from datetime import UTC, datetime

from app.runtime.memory.calibration import MAX_RATIO, observe, ratio_of
from app.runtime.memory.context import projection
from app.runtime.session.events import Event
from app.runtime.session.projector import fold
from app.runtime.session.state import SessionState


def response(seq: int, estimated: int, reported: int) -> Event:
    payload = {
        "text": "x",
        "tool_calls": [],
        "usage": {"input_tokens": reported, "output_tokens": 1, "total_tokens": reported + 1},
        "finish_reason": "stop",
        "calibration": {"key": "p/m", "estimated_tokens": estimated, "input_tokens": reported},
    }
    return Event("e", "s", seq, "MODEL_RESPONSE", payload, datetime.now(UTC))


def test_the_fold_learns_a_moving_ratio_per_profile_and_model() -> None:
    state = fold(None, [response(1, 100, 150)])
    assert state.calibration["p/m"]["ratio"] == 1.5 and state.calibration["p/m"]["samples"] == 1
    state = fold(state, [response(2, 100, 250)])
    assert state.calibration["p/m"]["ratio"] == round(0.7 * 1.5 + 0.3 * 2.5, 4)
    assert ratio_of(state.calibration, "p/m") == state.calibration["p/m"]["ratio"]
    assert ratio_of(state.calibration, "other/m") == 1.0
    assert SessionState.from_json(state.to_json()).calibration == state.calibration


def test_an_absurd_count_is_clamped_and_an_empty_calibration_is_not_stored() -> None:
    assert observe(None, 1, 10_000)["ratio"] == MAX_RATIO
    assert "calibration" not in SessionState().to_json()
    # An old MODEL_RESPONSE (no calibration) folds as before.
    old = Event("e", "s", 1, "MODEL_RESPONSE", {"usage": {"input_tokens": 5}}, datetime.now(UTC))
    assert fold(None, [old]).calibration == {}


def test_the_projection_fits_with_the_calibrated_estimate() -> None:
    items = []
    for i in range(6):
        items.append({"type": "message", "role": "user", "content": f"q{i} " + "w" * 200})
        items.append({"type": "message", "role": "assistant", "content": "a" * 200})
    kept_plain, plain = projection(items, None, 400)
    kept_learnt, learnt = projection(items, None, 400, ratio=2.0)
    assert learnt.tokens_before == -(-plain.tokens_before * 2 // 1)
    assert len(kept_learnt) < len(kept_plain) and learnt.fits
