"""`ProcessManager`: background processes that belong to a session and outlive a tool call.

A process is an OS process of the replica that started it: this manager holds the live
ones (their pipes, their captured output) in memory, and the ledger holds their history:
PROCESS_STARTED when one starts, PROCESS_EXITED when it ends, with the exit code, the reason
and the tail of its output. The session state folds those into process snapshots.

What a reader sees is the two put together. A process live here is `running`; one whose
PROCESS_EXITED is in the ledger is `exited`; one the ledger says was running but that no
longer runs here (the service restarted, crashed, or the session was forked or imported)
is `restored`: reported, with the last output the ledger kept, never silently dropped. On
shutdown the manager stops its processes and records them (reason `service_stopped`), so
their output survives a restart; after a crash there is no output to keep.

Output (stdout and stderr, merged) is kept up to `max_output_bytes`; past it the process is
killed and the output ends with a marker. A process that runs past `max_runtime_seconds` is
killed the same way. Processes run in their own process group, so killing one kills what
it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.runtime.errors import (
    AgentSessionError,
    ProcessNotFound,
    ProcessNotRunning,
    TooManyProcesses,
)
from app.runtime.ports import IdempotencyToken
from app.runtime.session.event_payloads import ProcessExited, ProcessStarted
from app.runtime.session.service import SessionRuntime
from app.runtime.tools.workspace import (
    ProcessPolicy,
    parse_command,
    process_environment,
    redact,
    resolve_program,
    workspace_dir,
    workspace_name,
)

log = logging.getLogger("app.processes")

STOP_GRACE_SECONDS = 2.0
DRAIN_SECONDS = 1.0


@dataclass
class _Process:
    """One live process and its captured output."""

    tenant_id: str
    session_id: str
    process_id: str
    argv: list[str]
    workspace: str
    run_id: str | None
    started_at: datetime
    runtime_seconds: float
    deadline: float
    proc: asyncio.subprocess.Process | None = None
    output: bytearray = field(default_factory=bytearray)
    cut_off: bool = False
    stdin_closed: bool = False
    reason: str | None = None  # why it ended: exited, stopped, timeout, output_cap, ...
    exit_code: int | None = None
    finished_at: datetime | None = None
    recorded: asyncio.Event = field(default_factory=asyncio.Event)  # PROCESS_STARTED written
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # exited, output drained
    done: asyncio.Event = field(default_factory=asyncio.Event)  # PROCESS_EXITED written
    unrecorded: bool = False  # PROCESS_STARTED could not be written: write no exit either
    watcher: asyncio.Task[None] | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.tenant_id, self.session_id, self.process_id)


class ProcessManager:
    def __init__(self, runtime: SessionRuntime, policy: ProcessPolicy) -> None:
        self.runtime = runtime
        self.policy = policy
        self._live: dict[tuple[str, str, str], _Process] = {}

    # ------------------------------------------------------------------ starting

    async def start(
        self,
        tenant_id: str,
        session_id: str,
        command: str,
        *,
        run_id: str | None = None,
        timeout_seconds: float | None = None,
        stdin: str | None = None,
        idempotency: IdempotencyToken | None = None,
    ) -> dict[str, Any]:
        """Start `command` in the session's workspace and record PROCESS_STARTED (with
        `idempotency`: a duplicate that recorded first makes this process be killed unrecorded
        and `IdempotentReplay` raised).

        Raises:
            SessionNotFound, CommandNotAllowed, WorkspaceOutsideRoot,
            TooManyProcesses (the tenant's live processes are at the cap).
        """
        session = await self.runtime.get(tenant_id, session_id)
        argv = parse_command(command, self.policy)
        program = resolve_program(argv[0], self.policy)
        name = workspace_name(session.binding, session_id)
        cwd = workspace_dir(self.policy, tenant_id, name)
        runtime = self.policy.max_runtime_seconds
        if timeout_seconds is not None:
            runtime = min(runtime, timeout_seconds)
        process = _Process(
            tenant_id=tenant_id,
            session_id=session_id,
            process_id=f"proc_{uuid.uuid4().hex[:16]}",
            argv=argv,
            workspace=name,
            run_id=run_id,
            started_at=datetime.now(UTC),
            runtime_seconds=runtime,
            deadline=time.monotonic() + runtime,
        )
        # Check and take the slot with no await in between: concurrent starts cannot both
        # slip under the cap.
        self._check_cap(tenant_id)
        self._live[process.key] = process
        try:
            cwd.mkdir(parents=True, exist_ok=True)
            process.proc = await asyncio.create_subprocess_exec(
                program,
                *argv[1:],
                cwd=cwd,
                env=process_environment(self.policy, cwd),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            self._live.pop(process.key, None)
            raise
        process.watcher = asyncio.create_task(self._watch(process), name=process.process_id)
        # Shielded: a caller interrupted now (its run cancelled) must not leave a process
        # that runs without its PROCESS_STARTED, nor a recorded one that nobody watches.
        recording = asyncio.ensure_future(self._record_start(process, idempotency))
        try:
            await asyncio.shield(recording)
        except asyncio.CancelledError:
            await asyncio.wait({recording})
            raise
        finally:
            if not recording.done() or recording.cancelled() or recording.exception():
                process.unrecorded = True  # not in the ledger: kill it, record nothing more
                process.reason = "stopped"
                self._signal(process, signal.SIGKILL)
            process.recorded.set()
        log.info("process %s started (%s)", process.process_id, argv[0])
        if stdin:
            # Best effort: a process that ends without reading its input is not an error.
            with contextlib.suppress(ProcessNotRunning):
                await self.write_stdin(tenant_id, session_id, process.process_id, stdin, eof=True)
        return self._view_live(process)

    def _check_cap(self, tenant_id: str) -> None:
        mine = [p for p in self._live.values() if p.tenant_id == tenant_id]
        if len(mine) < self.policy.max_live_per_tenant:
            return
        soonest = min(p.deadline for p in mine) - time.monotonic()
        raise TooManyProcesses(
            self.policy.max_live_per_tenant, retry_after=max(1, min(60, int(soonest) + 1))
        )

    async def _record_start(
        self, process: _Process, idempotency: IdempotencyToken | None = None
    ) -> None:
        assert process.proc is not None
        event = ProcessStarted(
            process_id=process.process_id,
            pid=process.proc.pid,
            command=process.argv,
            workspace=process.workspace,
            run_id=process.run_id,
            started_at=process.started_at.isoformat(),
        ).event(run_id=process.run_id)
        await self.runtime.append(
            process.tenant_id, process.session_id, [event], idempotency=idempotency
        )

    # ------------------------------------------------------------------ watching

    async def _watch(self, process: _Process) -> None:
        """Capture output, enforce the time cap, then record PROCESS_EXITED once."""
        proc = process.proc
        assert proc is not None
        pump = asyncio.create_task(self._pump(process))
        try:
            remaining = max(0.0, process.deadline - time.monotonic())
            try:
                await asyncio.wait_for(proc.wait(), remaining)
            except TimeoutError:
                if process.reason is None:
                    process.reason = "timeout"
                    limit = f"{process.runtime_seconds:g} s"
                    self._mark(process, f"killed after its max runtime of {limit}")
                self._signal(process, signal.SIGKILL)
                await proc.wait()
            try:
                await asyncio.wait_for(asyncio.shield(pump), DRAIN_SECONDS)
            except TimeoutError:
                # Something the process started still holds the pipe open: end the group.
                self._signal(process, signal.SIGKILL, group_only=True)
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
            process.exit_code = proc.returncode
            process.reason = process.reason or "exited"
            process.finished_at = datetime.now(UTC)
            process.ended.set()
            await process.recorded.wait()
            if not process.unrecorded:
                await self._record_exit(process)
        except Exception:
            log.exception("watching process %s failed", process.process_id)
        finally:
            process.ended.set()
            self._live.pop(process.key, None)
            process.done.set()

    async def _pump(self, process: _Process) -> None:
        """Read merged stdout/stderr into the bounded buffer; kill the process past the cap."""
        assert process.proc is not None and process.proc.stdout is not None
        cap = self.policy.max_output_bytes
        while True:
            chunk = await process.proc.stdout.read(65_536)
            if not chunk:
                return
            room = cap - len(process.output)
            if len(chunk) <= room:
                process.output += chunk
                continue
            process.output += chunk[:room]
            process.cut_off = True
            if process.reason is None:
                process.reason = "output_cap"
            self._mark(process, f"output cut off at {cap} bytes; the process was killed")
            self._signal(process, signal.SIGKILL)
            return

    def _mark(self, process: _Process, text: str) -> None:
        process.output += f"\n[{text}]\n".encode()

    def _signal(self, process: _Process, sig: int, *, group_only: bool = False) -> None:
        """Signal the process's group (it leads its own session), so its children go too."""
        proc = process.proc
        if proc is None or (proc.returncode is not None and not group_only):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    async def _record_exit(self, process: _Process) -> None:
        data = redact(bytes(process.output), self.policy.secrets)
        tail = data[-self.policy.persisted_output_bytes :] if data else b""
        exited = ProcessExited(
            process_id=process.process_id,
            pid=process.proc.pid if process.proc else None,
            exit_code=process.exit_code,
            reason=process.reason,
            output_bytes=len(data),
            output_cut_off=process.cut_off,
            output_offset=len(data) - len(tail),
            output=as_text(tail),
            finished_at=process.finished_at.isoformat() if process.finished_at else None,
        )
        try:
            await self.runtime.append(process.tenant_id, process.session_id, [exited.event()])
        except AgentSessionError as exc:  # the session was erased, or the event refused
            log.warning("could not record the end of process %s: %s", process.process_id, exc.code)
        log.info(
            "process %s ended (%s, exit code %s)",
            process.process_id,
            process.reason,
            process.exit_code,
        )

    # ------------------------------------------------------------------- reading

    async def list(self, tenant_id: str, session_id: str) -> list[dict[str, Any]]:
        """Every process of the session: live ones here, and the ledger's history."""
        # Live ones first: one that ends while the state loads is still reported from memory,
        # not as a ledger entry older than its PROCESS_EXITED (which would read "restored").
        live = [
            p for p in self._live.values() if (p.tenant_id, p.session_id) == (tenant_id, session_id)
        ]
        state = (await self.runtime.load(tenant_id, session_id)).state
        views = {pid: self._view_known(session_id, known) for pid, known in state.processes.items()}
        for process in live:
            views[process.process_id] = self._view_live(process)
        return sorted(views.values(), key=lambda v: (v["started_at"] or "", v["process_id"]))

    async def get(self, tenant_id: str, session_id: str, process_id: str) -> dict[str, Any]:
        """One process of the session. Raises SessionNotFound, ProcessNotFound."""
        live, known = await self._lookup(tenant_id, session_id, process_id)
        if live is not None:
            return self._view_live(live)
        assert known is not None
        return self._view_known(session_id, known)

    async def _lookup(
        self, tenant_id: str, session_id: str, process_id: str
    ) -> tuple[_Process | None, dict[str, Any] | None]:
        """(the live process, its ledger snapshot); one of them at least, else not found."""
        live = self._live.get((tenant_id, session_id, process_id))  # before the await: see list
        state = (await self.runtime.load(tenant_id, session_id)).state
        known = state.processes.get(process_id)
        if live is None and known is None:
            raise ProcessNotFound(process_id)
        return live, known

    async def settle(
        self, tenant_id: str, session_id: str, process_id: str, *, seconds: float
    ) -> dict[str, Any]:
        """Wait up to `seconds` for a live process to end; its view, with output if it did."""
        process = self._live.get((tenant_id, session_id, process_id))
        if process is None:
            return await self.get(tenant_id, session_id, process_id)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.ended.wait(), seconds)
        view = self._view_live(process)
        if process.ended.is_set():
            view["output"] = as_text(redact(bytes(process.output), self.policy.secrets))
        return view

    async def logs(
        self, tenant_id: str, session_id: str, process_id: str, *, offset: int, limit: int
    ) -> dict[str, Any]:
        """Captured output from byte `offset` (at most `limit` bytes), live or from the ledger.

        A process that no longer runs here has only the tail the ledger kept: a read before
        that tail starts where the tail starts (the answer's `offset` says where).
        """
        live, known = await self._lookup(tenant_id, session_id, process_id)
        if live is not None:
            view = self._view_live(live)
            data, start = redact(bytes(live.output), self.policy.secrets), 0
        else:
            assert known is not None
            view = self._view_known(session_id, known)
            data, start = await self._kept_output(tenant_id, session_id, known)
        begin = max(offset, start)
        chunk = data[begin - start : begin - start + limit]
        size = start + len(data)
        end = begin + len(chunk)
        return {
            "process_id": process_id,
            "status": view["status"],
            "offset": begin,
            "next_offset": end,
            "size": size,
            "eof": end >= size and view["status"] != "running",
            "data": as_text(chunk),
        }

    async def _kept_output(
        self, tenant_id: str, session_id: str, known: dict[str, Any]
    ) -> tuple[bytes, int]:
        """(the output tail PROCESS_EXITED kept, the byte offset it starts at)."""
        seq = known.get("exited_seq")
        if not seq:
            return b"", 0  # never recorded as ended (the service died with it): nothing kept
        events = await self.runtime.list_events(
            tenant_id, session_id, after_seq=seq - 1, until_seq=seq
        )
        if not events:
            return b"", 0
        payload = events[0].payload
        return str(payload.get("output") or "").encode(), int(payload.get("output_offset") or 0)

    def _view_live(self, process: _Process) -> dict[str, Any]:
        proc = process.proc
        running = not process.ended.is_set()
        return {
            "process_id": process.process_id,
            "session_id": process.session_id,
            "pid": proc.pid if proc else None,
            "command": process.argv,
            "workspace": process.workspace,
            "run_id": process.run_id,
            "status": "running" if running else "exited",
            "exit_code": None if running else process.exit_code,
            "reason": None if running else process.reason,
            "output_bytes": len(process.output),
            "started_at": process.started_at.isoformat(),
            "finished_at": process.finished_at.isoformat() if process.finished_at else None,
            "live": True,
        }

    def _view_known(self, session_id: str, known: dict[str, Any]) -> dict[str, Any]:
        status = known.get("status") or "restored"
        if status == "running":
            status = "restored"  # the ledger says running, but it does not run here any more
        return {
            "process_id": known.get("process_id"),
            "session_id": session_id,
            "pid": known.get("pid"),
            "command": list(known.get("command") or []),
            "workspace": known.get("workspace"),
            "run_id": known.get("run_id"),
            "status": status,
            "exit_code": known.get("exit_code"),
            "reason": known.get("reason"),
            "output_bytes": known.get("output_bytes") or 0,
            "started_at": known.get("started_at"),
            "finished_at": known.get("finished_at"),
            "live": False,
        }

    # ------------------------------------------------------------ stdin and stop

    async def write_stdin(
        self, tenant_id: str, session_id: str, process_id: str, data: str, *, eof: bool
    ) -> int:
        """Write to the process's stdin (and close it with `eof`); returns the bytes written.

        Raises:
            SessionNotFound, ProcessNotFound, ProcessNotRunning.
        """
        process, known = await self._lookup(tenant_id, session_id, process_id)
        if process is None or process.ended.is_set() or process.proc is None:
            view = (
                self._view_live(process) if process else self._view_known(session_id, known or {})
            )
            raise ProcessNotRunning(process_id, view["status"])
        stream = process.proc.stdin
        if stream is None or process.stdin_closed:
            raise ProcessNotRunning(process_id, "running with its stdin closed")
        raw = data.encode()
        try:
            stream.write(raw)
            await asyncio.wait_for(stream.drain(), 5)
            if eof:
                process.stdin_closed = True
                stream.close()
        except (BrokenPipeError, ConnectionResetError, TimeoutError) as exc:
            raise ProcessNotRunning(process_id, "not reading its stdin") from exc
        return len(raw)

    async def stop(self, tenant_id: str, session_id: str, process_id: str) -> dict[str, Any]:
        """Stop a live process (SIGTERM, then SIGKILL after a grace period); returns it ended.

        A process that has already ended is returned as it is.
        """
        await self.get(tenant_id, session_id, process_id)
        process = self._live.get((tenant_id, session_id, process_id))
        if process is not None:
            await self._terminate(process, "stopped")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.done.wait(), 5)
        return await self.get(tenant_id, session_id, process_id)

    async def _terminate(self, process: _Process, reason: str) -> None:
        if process.ended.is_set():
            return
        process.reason = process.reason or reason
        self._signal(process, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.ended.wait(), STOP_GRACE_SECONDS)
        self._signal(process, signal.SIGKILL)

    async def stop_session(self, tenant_id: str, session_id: str) -> int:
        """Stop every live process of a session (before it is erased); returns how many."""
        live = [
            p for p in self._live.values() if (p.tenant_id, p.session_id) == (tenant_id, session_id)
        ]
        await asyncio.gather(*(self._terminate(p, "stopped") for p in live))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(p.done.wait() for p in live)), 5)
        return len(live)

    async def stop_tenant(self, tenant_id: str) -> int:
        """Stop every live process of a tenant (before it is erased); returns how many."""
        sessions = {p.session_id for p in self._live.values() if p.tenant_id == tenant_id}
        stopped = await asyncio.gather(*(self.stop_session(tenant_id, s) for s in sessions))
        return sum(stopped)

    async def shutdown(self) -> None:
        """Stop every live process and record it (`service_stopped`) before the store closes."""
        live = list(self._live.values())
        if not live:
            return
        await asyncio.gather(*(self._terminate(p, "service_stopped") for p in live))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(p.done.wait() for p in live)), 5)

    def live_count(self, tenant_id: str | None = None) -> int:
        return sum(1 for p in self._live.values() if tenant_id in (None, p.tenant_id))


def as_text(data: bytes) -> str:
    """Output as text that every backend can store: undecodable bytes and NUL become U+FFFD."""
    return data.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
