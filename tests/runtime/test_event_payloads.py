"""Payload models and the event catalogue generated from them (issue #15, typed events).

Every event type has a model and a JSON Schema; every payload of the golden ledgers (old
shapes included) validates against its type's schema; and each payload that today's writers
recorded comes back unchanged when rebuilt through its model, so building events from the
models cannot change the stored JSON.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from app.runtime.session import event_payloads as ev
from app.runtime.session.event_catalogue import event_catalogue, payload_adapter
from app.runtime.session.events import EventType

GOLDEN = Path(__file__).parents[1] / "golden" / "ledgers"
# Written by hand (tests/golden/record.py): older shapes and a type from the future.
HANDWRITTEN = "v1-handwritten"


def _golden(*, recorded_only: bool = False) -> list[tuple[str, str, dict[str, Any]]]:
    """(file, type, payload) of every golden event."""
    found = []
    for path in sorted(GOLDEN.glob("*.jsonl")):
        name = path.name.removesuffix(".jsonl")
        if recorded_only and name == HANDWRITTEN:
            continue
        for line in path.read_text().splitlines()[1:]:
            data = json.loads(line)
            found.append((name, data["type"], data["payload"]))
    return found


def _models(event_type: EventType) -> list[type[ev.Payload]]:
    """The model classes of a type: one, or the members of its annotated union."""
    model = ev.PAYLOAD_MODELS[event_type]
    if isinstance(model, type):
        return [model]
    union = typing.get_args(model)[0]
    return list(typing.get_args(union))


def test_every_event_type_has_a_payload_model_of_that_type() -> None:
    assert list(ev.PAYLOAD_MODELS) == list(EventType)
    for event_type in EventType:
        models = _models(event_type)
        assert models, event_type
        for model in models:
            assert dataclasses.is_dataclass(model) and model.TYPE == event_type, model
            assert model.__dataclass_params__.frozen, model  # type: ignore[attr-defined]


def test_every_event_type_has_a_description_and_a_valid_schema() -> None:
    catalogue = event_catalogue()
    assert [info.type for info in catalogue] == list(EventType)
    for info in catalogue:
        assert info.description and "\n" not in info.description, info.type
        Draft202012Validator.check_schema(info.payload_schema)
        assert info.payload_schema.get("type") == "object" or "oneOf" in info.payload_schema


@pytest.mark.parametrize(("name", "event_type", "payload"), _golden())
def test_every_golden_payload_validates_against_its_schema(
    name: str, event_type: str, payload: dict[str, Any]
) -> None:
    if event_type not in EventType.__members__:
        assert name == HANDWRITTEN  # the one type from the future, which readers skip
        return
    schema = next(i.payload_schema for i in event_catalogue() if i.type == event_type)
    errors = [e.message for e in Draft202012Validator(schema).iter_errors(payload)]
    assert errors == [], (name, event_type)
    payload_adapter(EventType(event_type)).validate_python(payload)


def test_a_schema_refuses_a_payload_that_breaks_it() -> None:
    schema = next(i.payload_schema for i in event_catalogue() if i.type == "RUN_FINISHED")
    validator = Draft202012Validator(schema)
    assert not validator.is_valid({"stop_reason": None})  # no status
    assert not validator.is_valid({"status": "paused", "stop_reason": None})
    compress = next(i.payload_schema for i in event_catalogue() if i.type == "MEMORY_COMPRESS")
    assert not Draft202012Validator(compress).is_valid({"kind": "compact_failed"})


@pytest.mark.parametrize(("name", "event_type", "payload"), _golden(recorded_only=True))
def test_a_recorded_payload_rebuilt_through_its_model_is_unchanged(
    name: str, event_type: str, payload: dict[str, Any]
) -> None:
    models = _models(EventType(event_type))
    if len(models) > 1:  # a union: the variant of the payload's kind
        models = [m for m in models if m.__dataclass_fields__["kind"].default == payload["kind"]]
    (model,) = models
    rebuilt = model(**payload).event(run_id="r", turn_id="t")
    assert (rebuilt.type, rebuilt.payload, rebuilt.run_id, rebuilt.turn_id) == (
        event_type,
        payload,
        "r",
        "t",
    )


def test_payload_keys_follow_the_fields_and_omitted_ones_are_left_out_while_none() -> None:
    finished = ev.RunFinished(status="interrupted", stop_reason="INTERRUPTED")
    assert finished.to_payload() == {"status": "interrupted", "stop_reason": "INTERRUPTED"}
    usage = {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}
    full = ev.RunFinished(status="finished", stop_reason="COMPLETED", usage=usage, turns=2)
    assert list(full.to_payload()) == ["status", "stop_reason", "usage", "turns"]
    # None is written as null where today's writers write null: only marked fields are omitted.
    assert ev.WindowChanged(max_items=None).to_payload() == {"max_items": None}
    assert list(ev.AutoStop(stop_reason="INTERRUPTED", reason="cancelled").to_payload()) == [
        "stop_reason",
        "reason",
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        finished.status = "failed"  # type: ignore[misc]


def test_the_tool_output_item_has_one_shape() -> None:
    result = ev.ToolResult.answering("c1", "out", is_error=False).to_payload()
    assert result == {
        "item": {"type": "function_call_output", "call_id": "c1", "output": "out"},
        "call_id": "c1",
        "is_error": False,
    }
