"""Token estimates that learn: a per-(profile, model) ratio between what providers count
and what the four-characters-a-token heuristic guessed for the same prompt.

Each model response whose usage the provider reported records, in its MODEL_RESPONSE, the
heuristic estimate of the prompt it answered and the input tokens the provider counted
(`calibration`). The projector folds those into the session state (`calibration`, keyed
`profile/model`), so the figure survives restarts, forks and exports with the ledger, and
the context projection multiplies its estimate by the ratio. The ratio is a moving average
(recent prompts weigh more, so a changed tokenizer is learned), clamped to a sane range so
one odd answer cannot make the budget absurd.
"""

from __future__ import annotations

import json
import math
from typing import Any

from app.runtime.memory.items import estimate_tokens
from app.runtime.models.base import ModelRequest

# How much a new observation moves the ratio (exponential moving average).
WEIGHT = 0.3
MIN_RATIO, MAX_RATIO = 0.25, 4.0


def key_of(profile: str | None, model: str | None) -> str:
    return f"{profile or 'scripted'}/{model or ''}"


def prompt_estimate(request: ModelRequest) -> int:
    """The heuristic estimate of everything a request sends: items, instructions, tools."""
    items = (
        request.items_tokens if request.items_tokens is not None else estimate_tokens(request.items)
    )
    tools = len(json.dumps([t.parameters for t in request.tools])) if request.tools else 0
    names = sum(len(t.name) + len(t.description) for t in request.tools)
    return items + (len(request.instructions or "") + tools + names) // 4


def observe(entry: dict[str, Any] | None, estimated: int, reported: int) -> dict[str, Any]:
    """The calibration entry after one more (estimate, provider count) pair."""
    observed = _clamp(reported / max(estimated, 1))
    if not entry or not entry.get("samples"):
        ratio = observed
    else:
        ratio = _clamp((1 - WEIGHT) * float(entry["ratio"]) + WEIGHT * observed)
    return {
        "ratio": round(ratio, 4),
        "samples": int((entry or {}).get("samples", 0)) + 1,
        "last_estimated_tokens": estimated,
        "last_input_tokens": reported,
    }


def ratio_of(calibration: dict[str, dict[str, Any]], key: str) -> float:
    """The learnt ratio for `key`, or 1.0 (the heuristic as is) when nothing was learnt."""
    entry = calibration.get(key)
    return float(entry["ratio"]) if entry and entry.get("samples") else 1.0


def scaled(tokens: int, ratio: float) -> int:
    return tokens if ratio == 1.0 else math.ceil(tokens * ratio)


def _clamp(value: float) -> float:
    return min(MAX_RATIO, max(MIN_RATIO, value))
