"""The event catalogue: every event type, what it means, and its payload's JSON Schema.

Generated from the payload models (`event_payloads.PAYLOAD_MODELS`), so the catalogue a
client reads (`GET /v1/event-types`) cannot drift from what the runtime writes. Pydantic
only derives the schemas here, once per process; the write path never validates with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import TypeAdapter

from app.runtime.session.event_payloads import PAYLOAD_MODELS
from app.runtime.session.events import EventType


@dataclass(frozen=True, slots=True)
class EventTypeInfo:
    """One entry of the catalogue."""

    type: EventType
    description: str
    payload_schema: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "type": str(self.type),
            "description": self.description,
            "payload_schema": self.payload_schema,
        }


@cache
def payload_adapter(event_type: EventType) -> TypeAdapter[Any]:
    """The pydantic adapter of a type's payload model (for schemas and tests, not writes)."""
    return TypeAdapter(PAYLOAD_MODELS[event_type])


@cache
def event_catalogue() -> tuple[EventTypeInfo, ...]:
    """Every event type in vocabulary order. Built once; callers must not edit the schemas."""
    return tuple(_info(event_type) for event_type in EventType)


def _info(event_type: EventType) -> EventTypeInfo:
    schema = payload_adapter(event_type).json_schema()
    return EventTypeInfo(
        type=event_type,
        description=_first_paragraph(schema.get("description", "")),
        payload_schema=schema,
    )


def _first_paragraph(text: str) -> str:
    """A docstring's summary as one line (a summary may wrap in the source)."""
    return " ".join(text.strip().split("\n\n", 1)[0].split())
