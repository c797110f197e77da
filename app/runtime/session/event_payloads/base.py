"""The base of every payload model: a frozen dataclass that knows its event type.

A payload model is the one place an event type's payload is built. Its fields are the
payload's keys, in the order they are stored; `to_payload()` reads them straight into a dict
(no validation, no copying: the run path builds several events a turn), and `event()` wraps
that dict in the `NewEvent` the store writes. Readers never see these classes: the projector
folds the stored dicts, so payloads written before a field existed still fold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar, dataclass_transform

from app.runtime.session.events import EventType, NewEvent

# Field metadata for keys that today's writers leave out, rather than write null, while the
# value is None (a child session's parent, a stop's pending calls): with
# `field(default=None, metadata=OMIT_IF_NONE)` the stored JSON stays what those writers wrote.
OMIT_IF_NONE: Mapping[str, bool] = MappingProxyType({"omit_if_none": True})


class Payload:
    """What every payload model has: its event type, `to_payload()` and `event()`."""

    __slots__ = ()
    TYPE: ClassVar[EventType]
    # Set by `event_payload` from the dataclass fields, once per class.
    _KEYS: ClassVar[tuple[str, ...]]
    _OMITTED: ClassVar[tuple[str, ...]]
    # Set by `event_payload` (every payload model is a dataclass): what `fields()` reads.
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def to_payload(self) -> dict[str, Any]:
        """The stored payload: every field by its name, minus omitted ones that are None."""
        payload = {key: getattr(self, key) for key in self._KEYS}
        for key in self._OMITTED:
            if payload[key] is None:
                del payload[key]
        return payload

    def event(self, *, run_id: str | None = None, turn_id: str | None = None) -> NewEvent:
        """The event to write: the only way a payload model becomes a `NewEvent`."""
        return NewEvent(self.TYPE, self.to_payload(), run_id, turn_id)


_P = TypeVar("_P", bound=Payload)


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
def event_payload(event_type: EventType) -> Callable[[type[_P]], type[_P]]:
    """Make `cls` the payload model of `event_type`: a frozen, slotted, keyword-only dataclass.

    Keyword-only, so a call site names every key it writes; frozen, so an event built once
    cannot change between the write and the fold of the same object.
    """

    def make(cls: type[_P]) -> type[_P]:
        model = dataclass(frozen=True, slots=True, kw_only=True)(cls)
        model.TYPE = event_type
        model._KEYS = tuple(f.name for f in fields(model))
        model._OMITTED = tuple(f.name for f in fields(model) if f.metadata.get("omit_if_none"))
        return model

    return make
