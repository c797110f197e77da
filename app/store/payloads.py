"""`Payloads`: the funnel every payload passes before a write (redaction, size limits).

Kept apart from the stores that write (as eventsourcing keeps its `Mapper` apart from its
recorders): the ledger, the runs, the schedules and the webhooks share one.
"""

from __future__ import annotations

import os
from typing import Any

from app.runtime.errors import PayloadTooLarge
from app.runtime.session.events import NewEvent
from app.runtime.session.redaction import Redactor
from app.store.json_text import dumps
from app.store.snapshot_text import snapshot_text


def new_event_ids(n: int) -> list[str]:
    """`n` random (version 4) UUIDs as text, as `str(uuid.uuid4())` writes them, from one
    read of the system's random source for all of them: an event id is the write token a
    retried append is recognised by, so it must be unique, not secret, and `uuid4` spent most
    of its time building and formatting a `UUID` object per event."""
    digits = os.urandom(16 * n).hex()
    ids = []
    for i in range(0, 32 * n, 32):
        h = digits[i : i + 32]
        ids.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}")
    return ids


# The RFC 4122 variant: a UUID's 17th hex digit has its two high bits set to 10.
_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}


class Payloads:
    """Redacts what is written and refuses what is too big."""

    def __init__(
        self,
        *,
        redactor: Redactor | None = None,
        max_event_bytes: int = 2_097_152,
        max_metadata_bytes: int = 16_384,
    ) -> None:
        self.redactor = redactor or Redactor()
        self.max_event_bytes = max_event_bytes
        self.max_metadata_bytes = max_metadata_bytes

    def redact(self, value: Any) -> Any:
        """`value` with its secrets redacted (JSON columns other than event payloads)."""
        return self.redactor.value(value)

    def persistable(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The funnel every event payload and snapshot state passes through before a write:
        secrets are redacted, and an oversized payload is refused (the transaction rolls
        back, nothing is written)."""
        return self.persistable_json(payload)[0]

    def persistable_json(self, payload: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """`persistable`, also returning the JSON text it measured, for a caller that
        sends JSON text itself (the PostgreSQL fast path) and so encodes it only once."""
        # Encoded first: almost no payload holds anything to redact, and one search of its
        # text says so (`Redactor.json_may_change`); then the payload is stored as it is,
        # with no walk that copies it. Otherwise it is redacted and encoded again.
        text = dumps(payload)
        clean = payload
        if self.redactor.json_may_change(text):
            clean = self.redactor.value(payload)
            text = dumps(clean)
        # A UTF-8 character is at most 4 bytes: only a text that might be too big is encoded.
        if len(text) * 4 > self.max_event_bytes:
            size = len(text.encode())
            if size > self.max_event_bytes:
                raise PayloadTooLarge(
                    f"an event of {size} bytes exceeds {self.max_event_bytes} bytes"
                )
        return clean, text

    def persistable_snapshot(self, state: dict[str, Any]) -> tuple[str, str]:
        """A snapshot's state as stored (redacted, as `snapshot_text`'s text) and its content
        hash (checked on load)."""
        return snapshot_text(self.redactor.value(state))

    @staticmethod
    def check_append(
        events: list[NewEvent],
        expected_seq: int | None,
        snapshot: tuple[str, dict[str, Any]] | None,
    ) -> None:
        """A snapshot in an append is the fold at the new last seq: only known under
        `expected_seq`, and it must say so."""
        if snapshot is None:
            return
        if expected_seq is None:
            raise ValueError("a snapshot in an append needs expected_seq")
        if snapshot[1].get("seq") != expected_seq + len(events):
            raise ValueError("a snapshot must be the fold at the session's last seq")
