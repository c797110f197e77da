"""Payloads of the process events (when the process plane is enabled).

The earliest payloads of these types carried only a few of today's keys (a ledger may still
hold them), so every key those left out has a default here: the schema the catalogue serves
then accepts every payload a reader may meet. Today's writers give every field.
"""

from __future__ import annotations

from app.runtime.session.event_payloads.base import Payload, event_payload
from app.runtime.session.events import EventType


@event_payload(EventType.PROCESS_STARTED)
class ProcessStarted(Payload):
    """A process started in the session's workspace (`started_at` is ISO 8601)."""

    process_id: str
    pid: int | None = None
    command: list[str]
    workspace: str | None = None
    run_id: str | None = None
    started_at: str | None = None


@event_payload(EventType.PROCESS_EXITED)
class ProcessExited(Payload):
    """A process ended: how (`reason`, `exit_code`), and the tail of its output.

    `output` is the last bytes of the (redacted) output from `output_offset` on, of
    `output_bytes` in all; the process was killed at the output cap when `output_cut_off`.
    """

    process_id: str
    pid: int | None = None
    exit_code: int | None
    reason: str | None = None
    output_bytes: int = 0
    output_cut_off: bool = False
    output_offset: int = 0
    output: str = ""
    finished_at: str | None = None
