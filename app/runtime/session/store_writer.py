"""`StoreWriter`: the writes decided on a session's state, outside a hold.

`SessionRuntime.writer` hands it to a caller that decides on a view of its own (a cached
one); inside a hold the held session is the writer instead (`LedgerPort.hold`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.runtime.ports import (
    AppendResult,
    IdempotencyToken,
    LedgerPort,
    NewRun,
    RunPort,
    RunRecord,
)
from app.runtime.session.events import NewEvent


class StoreWriter:
    """The writes decided on a session's state, outside a hold: the ledger's append and the
    run store's start, each a transaction of its own."""

    def __init__(self, ledger: LedgerPort, runs: RunPort) -> None:
        self._ledger = ledger
        self._runs = runs

    async def append_events(
        self,
        tenant_id: str,
        session_id: str,
        *,
        events: list[NewEvent],
        expected_seq: int | None = None,
        expected_version: int | None = None,
        metadata_patch: dict[str, Any] | None = None,
        snapshot: tuple[str, dict[str, Any]] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> AppendResult:
        return await self._ledger.append_events(
            tenant_id, session_id, events=events, expected_seq=expected_seq,
            expected_version=expected_version, metadata_patch=metadata_patch,
            snapshot=snapshot, idempotency=idempotency,
        )  # fmt: skip

    async def start_run(
        self,
        tenant_id: str,
        session_id: str,
        *,
        run: NewRun,
        start_events: list[NewEvent],
        max_live_runs: int | None = None,
        expected: tuple[int, datetime] | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> tuple[RunRecord, AppendResult]:
        return await self._runs.start_run(
            tenant_id, session_id, run=run, start_events=start_events,
            max_live_runs=max_live_runs, expected=expected, idempotency=idempotency,
        )  # fmt: skip
