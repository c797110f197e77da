"""The base of every stream frame: the SSE message as it came (`event`, `data`, `id`).

The typed frames (`asr_client.events`, generated from the OpenAPI document) subclass it; a
frame this client has no model for (a newer server's event type) is a plain `Frame`.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import PrivateAttr

from .models import Model


class Frame(Model):
    """One SSE frame. `event` is its name (an event type, `delta`, `overflow`, `shutdown` or
    `ERROR`), `data` its JSON as a dict, `id` its own id (a ledger event's seq, or a tenant
    cursor; None for deltas and control frames). The subclass says what `data` holds, as
    typed fields: narrow with `isinstance(frame, RunFinishedEvent)` or `match`."""

    _event: str = PrivateAttr(default="message")
    _data: dict[str, Any] = PrivateAttr(default_factory=dict)
    _id: str | None = PrivateAttr(default=None)

    @classmethod
    def of(cls, event: str, data: dict[str, Any], id: str | None) -> Self:
        """The frame of an SSE message: `data` validated as this class, the message kept."""
        frame = cls.model_validate(data)
        frame._event, frame._data, frame._id = event, data, id
        return frame

    @property
    def event(self) -> str:
        return self._event

    @property
    def data(self) -> dict[str, Any]:
        return self._data

    @property
    def id(self) -> str | None:
        return self._id

    @property
    def is_event(self) -> bool:
        """A ledger event (its frame carries an id of its own)."""
        return self._id is not None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(event={self._event!r}, id={self._id!r}, data={self._data!r})"
