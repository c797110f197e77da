"""Erasure: a session (with the children it delegated) or a whole tenant, and the receipt.

A session's content lives in more places than its ledger: the rows that name it (its
Idempotency-Keys' stored answers, a webhook subscription or schedule on it), the children it
delegated work to, the processes it started and the files they wrote in its workspace, and
the state every replica may hold in memory. `Eraser` removes all of them, in that order:
processes first (a live one would write on), then the rows, then the files, then the
caches here and, by a control message (`erase_session` / `erase_tenant`), on every other
replica, which stop their own processes and remove their own workspace folders too.

What is kept is an `ErasureReceipt` per erasure: who asked, when, and how many rows and
files of each kind went; never content. `docs/how-to/erase-data.md` says what PostgreSQL's
own files may still hold, and for how long.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from app.runtime.errors import InvalidRequest, SessionNotFound, TenantNotFound
from app.runtime.ports import ErasurePort, ErasureReceipt, RunControl, RunSignal, SessionRecord

log = logging.getLogger("app.runtime.session.erasure")

ERASE_SESSION = "erase_session"
ERASE_TENANT = "erase_tenant"
# The run id field of a tenant's erase message (control messages name a run or a session).
WHOLE_TENANT = "*"
CHILD_POLICIES = ("erase", "keep")
# Delegation is bounded in depth; this bounds a tree a corrupt parent chain would make endless.
_MAX_SESSIONS_PER_ERASURE = 10_000


class ProcessStop(Protocol):
    """The process plane as erasure sees it: stop a session's or a tenant's live processes."""

    async def stop_session(self, tenant_id: str, session_id: str) -> int: ...

    async def stop_tenant(self, tenant_id: str) -> int: ...


class StateCache(Protocol):
    """What keeps a session's state in memory (the session runtime)."""

    def forget(self, tenant_id: str, session_id: str | None = None) -> None: ...

    async def find(self, tenant_id: str, session_id: str) -> SessionRecord | None: ...


@dataclass(frozen=True, slots=True)
class Workspaces:
    """Where sessions' files are: `<root>/<tenant_id>/<binding.workspace or session id>`."""

    root: Path

    def of_session(self, tenant_id: str, record: SessionRecord) -> Path | None:
        """The session's folder, or None for a name that would leave the tenant's folder."""
        name = record.binding.get("workspace", record.session_id)
        if not isinstance(name, str) or not name.strip() or name.startswith(("/", "~")):
            return None
        tenant = self.of_tenant(tenant_id)
        target = (tenant / name).resolve()
        return target if target != tenant and target.is_relative_to(tenant) else None

    def of_tenant(self, tenant_id: str) -> Path:
        return (self.root.resolve() / tenant_id).resolve()


def remove_folder(folder: Path | None) -> int:
    """Delete a folder and everything in it; returns how many files went (0: none there)."""
    if folder is None or not folder.is_dir():
        return 0
    files = sum(1 for path in folder.rglob("*") if not path.is_dir())
    shutil.rmtree(folder, ignore_errors=True)
    return files


class Eraser:
    """Erases sessions and tenants completely and records a receipt for each."""

    def __init__(
        self,
        store: ErasurePort,
        sessions: StateCache,
        *,
        workspaces: Workspaces | None,
        processes: ProcessStop | None,
        control: RunControl,
        forget_tenant: Callable[[str], None] = lambda tenant_id: None,
        children: str = "erase",
    ) -> None:
        if children not in CHILD_POLICIES:
            raise ValueError(f"children must be one of {CHILD_POLICIES}")
        self.store = store
        self.sessions = sessions
        self.workspaces = workspaces
        self.processes = processes
        self.control = control
        self.forget_tenant = forget_tenant
        self.children = children
        self._stops: set[asyncio.Task[int]] = set()
        control.on_control(self._on_control)

    async def erase_session(
        self, tenant_id: str, session_id: str, *, requested_by: str
    ) -> ErasureReceipt:
        """Erase the session, and (policy `erase`) the sessions it delegated to, their own
        delegated children included.

        Raises:
            SessionNotFound: there is no such session.
        """
        record = await self.sessions.find(tenant_id, session_id)
        if record is None:
            raise SessionNotFound(session_id)
        tree = [record]
        if self.children == "erase":
            tree += await self._delegated_tree(tenant_id, session_id)
        counts: dict[str, int] = {"sessions_erased": 0, "processes_stopped": 0, "files": 0}
        for each in tree:
            if self.processes is not None:
                counts["processes_stopped"] += await self.processes.stop_session(
                    tenant_id, each.session_id
                )
            rows = await self.store.erase_session(tenant_id, each.session_id)
            if rows is None:
                continue  # erased meanwhile by another request
            counts["sessions_erased"] += 1
            for table, n in rows.items():
                counts[table] = counts.get(table, 0) + n
            if self.workspaces is not None:
                counts["files"] += remove_folder(self.workspaces.of_session(tenant_id, each))
            self.sessions.forget(tenant_id, each.session_id)
            await self.control.send_control(RunSignal(ERASE_SESSION, tenant_id, each.session_id))
        if counts["sessions_erased"] == 0:
            raise SessionNotFound(session_id)
        return await self._receipt(tenant_id, "session", session_id, requested_by, counts)

    async def erase_tenant(self, tenant_id: str, *, requested_by: str) -> ErasureReceipt:
        """Erase every session, key, subscription, schedule and file of the tenant, and the
        tenant itself; the receipt stays.

        Raises:
            TenantNotFound: there is no such tenant (nothing is erased, no receipt).
        """
        counts: dict[str, int] = {"processes_stopped": 0, "files": 0}
        if self.processes is not None:
            counts["processes_stopped"] = await self.processes.stop_tenant(tenant_id)
        rows = await self.store.erase_tenant(tenant_id)
        if rows is None:
            raise TenantNotFound(f"tenant {tenant_id!r} not found")
        counts.update(rows)
        if self.workspaces is not None:
            counts["files"] = remove_folder(self.workspaces.of_tenant(tenant_id))
        self._forget_tenant(tenant_id)
        await self.control.send_control(RunSignal(ERASE_TENANT, tenant_id, WHOLE_TENANT))
        return await self._receipt(tenant_id, "tenant", None, requested_by, counts)

    async def list_receipts(
        self, tenant_id: str, *, limit: int = 100, before: str | None = None
    ) -> list[ErasureReceipt]:
        """A tenant's receipts, newest first (also once the tenant is erased)."""
        if not 1 <= limit <= 1000:
            raise InvalidRequest("limit must be between 1 and 1000")
        return await self.store.list_receipts(tenant_id, limit=limit, before=before)

    async def _delegated_tree(self, tenant_id: str, session_id: str) -> list[SessionRecord]:
        found: list[SessionRecord] = []
        frontier = [session_id]
        while frontier and len(found) < _MAX_SESSIONS_PER_ERASURE:
            parent = frontier.pop()
            for child_id in await self.store.list_delegated_children(tenant_id, parent):
                child = await self.sessions.find(tenant_id, child_id)
                if child is not None:
                    found.append(child)
                    frontier.append(child_id)
        return found

    async def _receipt(
        self,
        tenant_id: str,
        scope: str,
        session_id: str | None,
        requested_by: str,
        counts: dict[str, int],
    ) -> ErasureReceipt:
        now = datetime.now(UTC)
        receipt = ErasureReceipt(
            # Time-ordered, so that receipt ids page newest first.
            receipt_id=f"er_{now.strftime('%Y%m%d%H%M%S%f')}_{uuid.uuid4().hex[:8]}",
            tenant_id=tenant_id,
            scope=scope,
            session_id=session_id,
            requested_by=requested_by[:128],
            erased_at=now,
            counts={k: v for k, v in sorted(counts.items()) if v},
        )
        await self.store.save_receipt(receipt)
        log.info("erased %s of tenant %s: receipt %s", scope, tenant_id, receipt.receipt_id)
        return receipt

    def _forget_tenant(self, tenant_id: str) -> None:
        self.sessions.forget(tenant_id)
        self.forget_tenant(tenant_id)

    def _on_control(self, signal: RunSignal) -> None:
        """Another replica erased (or this one did): drop what is held here, stop the
        processes started here and remove the files written here."""
        if signal.kind == ERASE_SESSION:
            self.sessions.forget(signal.tenant_id, signal.run_id)
            if self.processes is not None:
                self._spawn(self.processes.stop_session(signal.tenant_id, signal.run_id))
        elif signal.kind == ERASE_TENANT:
            self._forget_tenant(signal.tenant_id)
            if self.processes is not None:
                self._spawn(self.processes.stop_tenant(signal.tenant_id))
            if self.workspaces is not None:
                remove_folder(self.workspaces.of_tenant(signal.tenant_id))

    def _spawn(self, stop: Coroutine[Any, Any, int]) -> None:
        """Stop in the background: a control handler must not block the listener."""
        task = asyncio.ensure_future(stop)
        self._stops.add(task)
        task.add_done_callback(self._stops.discard)
