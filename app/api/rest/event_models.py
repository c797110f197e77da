"""The typed event models of the HTTP contract: one per event type, told apart by `type`.

`EventRead` is a discriminated union: every member has the common event fields, `type` fixed
to its event type, and `payload` typed by that type's payload model (the ones behind
`GET /v1/event-types`). OpenAPI shows it as `oneOf` with a `discriminator` on `type`, so a
generated client narrows the payload by checking `type`.

The models describe answers; they never re-validate them. Routes that return events answer
with the stored JSON as it is (a JSON response), so no payload is ever reshaped or rejected
on its way out; tests check that the ledger's payloads match these schemas.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, cast

from pydantic import BaseModel, ConfigDict, Field, create_model

from app.runtime.session.event_payloads import PAYLOAD_MODELS
from app.runtime.session.events import EventType


class EventBase(BaseModel):
    """The fields every event has, whatever its type."""

    model_config = ConfigDict(extra="allow")

    event_id: str = Field(description="Globally unique id of the event.")
    session_id: str
    seq: int = Field(description="Position in the session's ledger: 1, 2, 3, ... with no gap.")
    run_id: str | None = Field(description="The run that wrote it, if any.")
    turn_id: str | None = Field(description="The model turn that wrote it, if any.")
    created_at: datetime = Field(description="When it was committed (RFC 3339, UTC, `Z`).")
    position: int = Field(description="Position in the tenant-wide order of events.")


def _camel(event_type: EventType) -> str:
    return "".join(part.capitalize() for part in event_type.value.split("_"))


def _event_model(event_type: EventType) -> type[BaseModel]:
    model = create_model(
        f"{_camel(event_type)}Event",
        __base__=EventBase,
        __doc__=f"An event of type {event_type.value}.",
        # A Literal of a value known only at run time: Any to the type checker.
        type=(cast(Any, Literal)[event_type.value], Field(description="The event type.")),
        payload=(PAYLOAD_MODELS[event_type], Field(description="What the event records.")),
    )
    return model


EVENT_MODELS: dict[EventType, type[BaseModel]] = {t: _event_model(t) for t in EventType}

# Both types are built at run time from the vocabulary; to the type checker, an event is a
# model and an event type's name a str.
if TYPE_CHECKING:
    EventRead = BaseModel
    EventTypeName = str
else:
    EventRead = Annotated[
        Union[tuple(EVENT_MODELS.values())],  # noqa: UP007
        Field(discriminator="type"),
    ]
    """Any event: the member whose `type` matches."""

    EventTypeName = Annotated[
        Literal[tuple(t.value for t in EventType)],
        Field(description="An event type of the vocabulary (`GET /v1/event-types`)."),
    ]


def payload_model(event_type: str) -> Any:
    """The payload model of an event type (for tests and examples)."""
    return PAYLOAD_MODELS[EventType(event_type)]
