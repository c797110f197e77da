"""The operator verbs of `asr` that read or change sessions: tenants, sessions, retention.

Each verb is an async function over a `Toolkit` (stores, runtime, accounts built from the
settings) that writes its result to `out`, as JSON Lines where the output is data, so that
it pipes into `jq` and into `asr sessions import`. `app.cli` parses arguments and calls
these; nothing here parses arguments or exits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TextIO

from app.assembly import runtime_over
from app.live.control_wire import CONTROL_CHANNEL, encode_control
from app.runtime.access.accounts import Accounts
from app.runtime.errors import TenantNotFound
from app.runtime.ports import (
    ErasureReceipt,
    LocalControl,
    RunSignal,
    SessionRecord,
    TenantRetention,
)
from app.runtime.session.erasure import Eraser, Workspaces
from app.runtime.session.retention import RetentionPolicy, apply_retention
from app.runtime.session.service import Limits, SessionRuntime
from app.runtime.session.transfer import export_ledger, import_ledger, parse_export
from app.settings import Settings
from app.store.engine import make_engine
from app.store.stores import Stores, open_stores


@dataclass(frozen=True)
class Toolkit:
    stores: Stores
    runtime: SessionRuntime
    accounts: Accounts
    eraser: Eraser


class NotifyControl(LocalControl):
    """Control messages from the command line: handled here, and sent to the running
    replicas over PostgreSQL's control channel (SQLite has one process: nothing to tell)."""

    def __init__(self, stores: Stores) -> None:
        super().__init__()
        self._notifier = stores.database.announcer.notifier

    async def send_control(self, signal: RunSignal) -> None:
        await super().send_control(signal)
        payload = encode_control(signal.kind, signal.tenant_id, signal.run_id)
        if self._notifier is not None and payload is not None:
            await self._notifier.send(CONTROL_CHANNEL, [payload])


@asynccontextmanager
async def toolkit(settings: Settings) -> AsyncIterator[Toolkit]:
    """Store, runtime and accounts on one engine, disposed of on exit."""
    engine = make_engine(settings)
    stores = open_stores(engine, max_metadata_bytes=settings.max_metadata_bytes)
    runtime = runtime_over(
        stores,
        limits=Limits(
            max_metadata_bytes=settings.max_metadata_bytes,
            snapshot_every=settings.snapshot_every,
        ),
    )
    eraser = Eraser(
        stores.erasure,
        runtime,
        # The files of the workspace root this machine sees; the replicas remove their own.
        workspaces=Workspaces(settings.workspace_root),
        processes=None,  # the replicas stop their own, told by the control message
        control=NotifyControl(stores),
        children=settings.erasure_children,
    )
    try:
        yield Toolkit(
            stores=stores, runtime=runtime, accounts=Accounts(stores.accounts), eraser=eraser
        )
    finally:
        await engine.dispose()


def json_line(out: TextIO, data: dict[str, Any]) -> None:
    """One JSON Lines record of the admin verbs' output (`asr schedules` writes them too)."""
    out.write(json.dumps(data, separators=(",", ":"), default=str) + "\n")


def session_row(record: SessionRecord) -> dict[str, Any]:
    return {
        "session_id": record.session_id,
        "status": record.status,
        "last_seq": record.last_seq,
        "version": record.version,
        "root_session_id": record.root_session_id,
        "parent_session_id": record.parent_session_id,
        "forked_from_seq": record.forked_from_seq,
        "active_run_id": record.active_run_id,
        "metadata": record.metadata,
        "created_at": record.created_at.isoformat(),
        "updated_at": record.updated_at.isoformat(),
    }


async def list_tenants(kit: Toolkit, out: TextIO) -> None:
    for tenant in await kit.accounts.list_tenants():
        json_line(
            out,
            {
                "name": tenant.name,
                "tenant_id": tenant.tenant_id,
                "created_at": tenant.created_at.isoformat(),
            },
        )


async def list_sessions(
    kit: Toolkit, out: TextIO, *, tenant: str, limit: int, status: str | None
) -> None:
    """Newest first, all pages up to `limit` sessions."""
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    after = None
    remaining = limit
    while remaining > 0:
        page = await kit.runtime.list(
            tenant_id, limit=min(remaining, 500), after=after, status=status
        )
        for record in page:
            json_line(out, session_row(record))
        if len(page) < min(remaining, 500):
            return
        remaining -= len(page)
        after = (page[-1].created_at, page[-1].session_id)


async def show_session(kit: Toolkit, out: TextIO, *, tenant: str, session_id: str) -> None:
    """The session row and a summary of its state (counts, not contents)."""
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    loaded = await kit.runtime.load(tenant_id, session_id)
    state = loaded.state
    json_line(
        out,
        {
            **session_row(loaded.session),
            "agent": loaded.session.agent,
            "binding": loaded.session.binding,
            "memory_items": len(state.items),
            "has_summary": state.summary is not None,
            "max_items": state.max_items,
            "usage": state.usage,
        },
    )


async def print_events(
    kit: Toolkit,
    out: TextIO,
    *,
    tenant: str,
    session_id: str,
    after_seq: int,
    limit: int | None,
    types: list[str] | None,
) -> int:
    """Events as JSON Lines; returns the last seq printed (or `after_seq`)."""
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    last = after_seq
    remaining = limit
    while remaining is None or remaining > 0:
        batch_size = 1000 if remaining is None else min(remaining, 1000)
        batch = await kit.runtime.list_events(
            tenant_id, session_id, after_seq=last, types=types, limit=batch_size
        )
        for event in batch:
            json_line(out, event.to_json())
            last = event.seq
        if remaining is not None:
            remaining -= len(batch)
        if len(batch) < batch_size:
            break
    out.flush()
    return last


async def tail_events(
    kit: Toolkit,
    out: TextIO,
    *,
    tenant: str,
    session_id: str,
    after_seq: int,
    interval: float,
    max_seconds: float | None,
) -> None:
    """Print new events as they are committed, polling every `interval` seconds.

    Polling the table rather than listening on the bus: it works the same on SQLite and
    through PgBouncer, and an operator's tail needs no sub-second latency.
    """
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    last = after_seq
    while True:
        last = await print_events(
            kit, out, tenant=tenant, session_id=session_id, after_seq=last, limit=None, types=None
        )
        if deadline is not None and time.monotonic() >= deadline:
            return
        await asyncio.sleep(interval)


async def export_session(kit: Toolkit, out: TextIO, *, tenant: str, session_id: str) -> int:
    """Write the export (header + events); returns the number of events."""
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    count = -1
    async for line in export_ledger(kit.runtime, tenant_id, session_id):
        json_line(out, line)
        count += 1
    out.flush()
    return count


async def import_session(
    kit: Toolkit, source: TextIO, *, tenant: str, session_id: str | None
) -> SessionRecord:
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    header, events = parse_export(source)
    loaded = await import_ledger(kit.runtime, tenant_id, header, events, session_id=session_id)
    return loaded.session


async def run_retention(
    kit: Toolkit,
    out: TextIO,
    *,
    policy: RetentionPolicy,
    dry_run: bool,
    tenant: str | None = None,
) -> None:
    only = [await kit.accounts.tenant_id_of(tenant)] if tenant is not None else None
    report = await apply_retention(
        kit.stores.maintenance,
        policy,
        tenants=kit.stores.accounts,
        dry_run=dry_run,
        tenant_ids=only,
        pruner=kit.runtime,
    )
    for tenant_id, session_id in report.sessions_erased:
        verb = "erased" if not dry_run else "would_erase"
        json_line(out, {verb: session_id, "tenant_id": tenant_id})
    for tenant_id, outcome in report.sessions_pruned:
        verb = "pruned" if not dry_run else "would_prune"
        json_line(
            out,
            {
                verb: outcome.session_id,
                "tenant_id": tenant_id,
                "cut_seq": outcome.cut_seq,
                "events_removed": outcome.events_removed,
            },
        )
    json_line(
        out,
        {
            "dry_run": dry_run,
            "idle_days": policy.idle_days,
            "keep_snapshots": policy.keep_snapshots,
            "sessions_erased": len(report.sessions_erased),
            "sessions_pruned": len(report.sessions_pruned),
            "events_pruned": report.events_pruned,
            "snapshots_deleted": report.snapshots_deleted,
            "deliveries_deleted": report.deliveries_deleted,
        },
    )


def policy_line(tenant_id: str, policy: TenantRetention, stored: bool) -> dict[str, Any]:
    return {
        "tenant_id": tenant_id,
        "idle_days": policy.idle_days,
        "prune": policy.prune,
        "prune_min_events": policy.prune_min_events,
        "stored": stored,
    }


async def show_retention(
    kit: Toolkit, out: TextIO, *, tenant: str, defaults: RetentionPolicy
) -> None:
    """The tenant's retention policy: its own, or the settings' defaults."""
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    stored = await kit.stores.maintenance.get_tenant_policy(tenant_id)
    policy = stored or TenantRetention(idle_days=defaults.idle_days)
    json_line(out, policy_line(tenant_id, policy, stored is not None))


async def set_retention(
    kit: Toolkit,
    out: TextIO,
    *,
    tenant: str,
    defaults: RetentionPolicy,
    changes: dict[str, Any],
) -> None:
    """Store the tenant's policy: the given fields over what applies now."""
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    current = await kit.stores.maintenance.get_tenant_policy(tenant_id)
    base = current or TenantRetention(idle_days=defaults.idle_days)
    policy = dataclasses.replace(base, **changes)
    stored = await kit.stores.maintenance.put_tenant_policy(tenant_id, policy)
    if stored is None:
        raise TenantNotFound(tenant)
    json_line(out, policy_line(tenant_id, stored, True))


def receipt_line(receipt: ErasureReceipt) -> dict[str, Any]:
    return {
        "receipt_id": receipt.receipt_id,
        "tenant_id": receipt.tenant_id,
        "scope": receipt.scope,
        "session_id": receipt.session_id,
        "requested_by": receipt.requested_by,
        "erased_at": receipt.erased_at.isoformat(),
        "counts": receipt.counts,
    }


async def erase_tenant(kit: Toolkit, out: TextIO, *, tenant: str, requested_by: str) -> None:
    """Erase the named tenant and everything it has; prints the receipt."""
    tenant_id = await kit.accounts.tenant_id_of(tenant)
    receipt = await kit.eraser.erase_tenant(tenant_id, requested_by=requested_by)
    json_line(out, receipt_line(receipt))


async def list_erasures(kit: Toolkit, out: TextIO, *, tenant_id: str, limit: int) -> None:
    """A tenant's erasure receipts, newest first (by id: the tenant may be gone)."""
    for receipt in await kit.eraser.list_receipts(tenant_id, limit=limit):
        json_line(out, receipt_line(receipt))
