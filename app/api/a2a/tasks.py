"""The SDK's `TaskStore` over our runs and ledger: a task is read, never written.

A task is the run its first message started (its id is that run's id) and the runs that
continued it: the runs of the same session that follow it without an input of their own
(a continuation starts from an approval, a tool output or an answer written in its prefix;
an A2A message that starts a new task always carries the run's input). Its context is the
session. Nothing here is kept in memory, so every replica reads the same task.
"""

from __future__ import annotations

from dataclasses import dataclass

from a2a.server.context import ServerCallContext
from a2a.server.tasks.task_store import TaskStore
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError

from app.api.a2a.contexts import CONTEXT_KEY, MARK_KEY, session_id_of
from app.api.a2a.fold import TaskFold
from app.runtime.errors import NotFound
from app.runtime.ports import RunRecord, SessionRecord
from app.runtime.runs.manager import LIVE_STATUSES, RunManager
from app.runtime.session.service import SessionRuntime

LIST_SESSIONS = 100


def tenant_of(context: ServerCallContext) -> str:
    """The caller's tenant, put in the call's state by the route after authentication."""
    return str(context.state["tenant_id"])


def context_id_of(session: SessionRecord) -> str:
    return str(session.metadata.get(CONTEXT_KEY) or session.session_id)


@dataclass(frozen=True, slots=True)
class TaskRuns:
    """One task's session and runs, oldest first (the last one is the task's present)."""

    session: SessionRecord
    runs: list[RunRecord]

    @property
    def task_id(self) -> str:
        return self.runs[0].run_id

    @property
    def latest(self) -> RunRecord:
        return self.runs[-1]


def chains(runs_newest_first: list[RunRecord]) -> list[list[RunRecord]]:
    """The session's runs grouped into tasks, oldest first."""
    out: list[list[RunRecord]] = []
    for run in reversed(runs_newest_first):
        if out and run.input is None:
            out[-1].append(run)
        else:
            out.append([run])
    return out


class RunTaskStore(TaskStore):
    """Tasks derived from runs (`chains`) and folded from the ledger (`TaskFold`)."""

    def __init__(self, runtime: SessionRuntime, runs: RunManager) -> None:
        self.runtime = runtime
        self.runs = runs

    async def find(self, tenant_id: str, task_id: str) -> TaskRuns | None:
        """The task's runs, or None when the id names no task of this tenant."""
        run = await self.runtime.find_run(tenant_id, task_id)
        if run is None:
            return None
        try:
            session = await self.runtime.get(tenant_id, run.session_id)
        except NotFound:
            return None
        for chain in chains(await self.runs.list_runs(tenant_id, run.session_id)):
            if chain[0].run_id == task_id:
                return TaskRuns(session, chain)
        return None  # a continuation's own run id is not a task id

    async def fold(
        self, tenant_id: str, found: TaskRuns, *, before_seq: int | None = None
    ) -> TaskFold:
        """The task folded from its runs' events as the ledger has them now (those before
        `before_seq` only, when given)."""
        fold = TaskFold(task_id=found.task_id, context_id=context_id_of(found.session))
        first = found.runs[0].first_seq
        if first is None:  # still queued: nothing written yet
            return fold
        latest = found.latest
        events = await self.runtime.list_events(
            tenant_id,
            found.session.session_id,
            after_seq=first - 1,
            until_seq=latest.last_seq if latest.status not in LIVE_STATUSES else None,
        )
        ours = {r.run_id for r in found.runs}
        for event in events:
            # The events between the task's runs (its decisions) are its own; the next
            # task's start ends it.
            if event.run_id is not None and event.run_id not in ours:
                break
            if before_seq is not None and event.seq >= before_seq:
                break
            fold.apply(event)
        return fold

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        tenant_id = tenant_of(context)
        found = await self.find(tenant_id, task_id)
        if found is None:
            return None
        return (await self.fold(tenant_id, found)).task()

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The tasks of one context (or of the sessions A2A created), newest first, paged by
        the number of tasks skipped."""
        tenant_id = tenant_of(context)
        size = params.page_size or 50
        if not 1 <= size <= 100:
            raise InvalidParamsError(message="pageSize must be between 1 and 100")
        try:
            skip = int(params.page_token or "0")
        except ValueError:
            raise InvalidParamsError(message="pageToken is not one this server gave") from None
        if params.context_id:
            sessions = [await self.runtime.find(tenant_id, session_id_of(params.context_id))]
        else:
            sessions = list(
                await self.runtime.list(tenant_id, limit=LIST_SESSIONS, metadata={MARK_KEY: "true"})
            )
        found: list[TaskRuns] = []
        for session in sessions:
            if session is None:
                continue
            for chain in chains(await self.runs.list_runs(tenant_id, session.session_id)):
                found.append(TaskRuns(session, chain))
        found.sort(key=lambda t: t.runs[0].created_at, reverse=True)
        tasks: list[Task] = []
        history = params.history_length if params.HasField("history_length") else None
        for item in found:
            task = (await self.fold(tenant_id, item)).task(history_length=history)
            if params.status and task.status.state != params.status:
                continue
            if params.HasField("status_timestamp_after") and (
                task.status.timestamp.ToDatetime() <= params.status_timestamp_after.ToDatetime()
            ):
                continue
            tasks.append(task)
        page = tasks[skip : skip + size]
        more = skip + size < len(tasks)
        return ListTasksResponse(
            tasks=page,
            next_page_token=str(skip + size) if more else "",
            page_size=size,
            total_size=len(tasks),
        )

    async def save(self, task: Task, context: ServerCallContext) -> None:
        raise UnsupportedOperationError(message="tasks are written by their runs, not saved")

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        raise UnsupportedOperationError(message="a task is deleted with its context's session")
