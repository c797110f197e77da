"""The HTTP baselines, served by uvicorn exactly as `asr serve` serves the service (one
process, same loop and HTTP parser choice, no access log).

    python -m bench.bare_app PORT
        a bare FastAPI POST endpoint returning a constant: the HTTP stack's own limit.
    python -m bench.bare_app PORT --writes DATABASE_URL --tenant TENANT_ID --events FILE
            [--model-ms MS]
        a bare FastAPI handler at `POST /v1/sessions/{session_id}/runs` that makes exactly
        the writes a wait-mode echo run makes, through the bare driver: the real limit of
        a run, which must commit three times (its start, its request step, its response
        with its end). On PostgreSQL the same three stored functions the store calls
        (asyncpg); on SQLite the same statements the store sends (aiosqlite, one writer,
        BEGIN IMMEDIATE, the same pragmas). No auth, no idempotency record, no state fold,
        no NOTIFY, no cache: what is left is what a run has to pay. With `--model-ms`, the
        handler sleeps that long between the request step and the response, where a real
        run waits on its model (the in-flight benchmark's baseline).
    python -m bench.bare_app PORT --frames FILE
        a bare Starlette `StreamingResponse` at `POST /sse` writing the frames a real
        streamed run sent (recorded in FILE with the model's pace), sleeping the pace
        before each delta frame after the first: the floor for streaming in Python.

`FILE` holds the three event batches a real echo run wrote (types, turn ids and payload
JSON, taken from the service in the same benchmark run), so the rows are the real ones.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

# The placeholder for the run's id in the recorded batches' JSON.
RUN = "@RUN@"
LEASE = timedelta(seconds=30)
MAX_LIVE = 10000

app = FastAPI()


@app.post("/run")
async def run() -> dict[str, str]:
    return {"status": "finished", "output": "echo: hello"}


class Batches:
    """The recorded run: three batches of (type, turn_id template, payload JSON template)."""

    def __init__(self, path: Path) -> None:
        doc = json.loads(path.read_text())
        self.batches: list[list[tuple[str, str | None, str]]] = [
            [(e["type"], e["turn_id"], e["payload"]) for e in batch] for batch in doc["batches"]
        ]
        self.options = doc["options"]
        self.usage = doc["usage"]
        self.output = doc["output"]

    def rows(self, index: int, run_id: str) -> list[tuple[str, str, str | None, str]]:
        """(event_id, type, turn_id, payload JSON) of batch `index` for `run_id`."""
        return [
            (
                str(uuid.uuid4()),
                type_,
                turn.replace(RUN, run_id) if turn else None,
                payload.replace(RUN, run_id),
            )
            for type_, turn, payload in self.batches[index]
        ]

    def json_array(self, index: int, run_id: str) -> str:
        """Batch `index` as the functions' `p_events` (one JSON array)."""
        return (
            "["
            + ",".join(
                f'{{"id":"{eid}","type":"{t}","run_id":"{run_id}","turn_id":{json.dumps(turn)},'
                f'"payload":{payload}}}'
                for eid, t, turn, payload in self.rows(index, run_id)
            )
            + "]"
        )


_PG_RUN = "o_session, o_run, o_xact_id, o_positions"
_PG_START = (
    f"SELECT {_PG_RUN} FROM asr_run_start(p_tenant => $1, p_session => $2, p_run => $3,"
    " p_max_live => $4, p_now => $5, p_owner => $6, p_lease => $7, p_input => $8,"
    " p_options => $9, p_expected_version => $10, p_expected_created_at => $11,"
    " p_events => $12, p_idem_key => $13, p_idem_hash => $14, p_idem_expires => $15)"
)
_PG_STEP = (
    f"SELECT {_PG_RUN} FROM asr_run_step(p_tenant => $1, p_session => $2, p_run => $3,"
    " p_epoch => $4, p_now => $5, p_lease => $6, p_turns => $7, p_usage => $8,"
    " p_finish => $9, p_status => $10, p_stop_reason => $11, p_output => $12,"
    " p_error => $13, p_events => $14)"
)


class PgWrites:
    """The three stored-function calls of an echo run, each on a pooled connection."""

    def __init__(
        self, url: str, tenant: str, batches: Batches, pool_size: int, model_ms: int = 0
    ) -> None:
        self.url, self.tenant, self.batches, self.pool_size = url, tenant, batches, pool_size
        self.model_seconds = model_ms / 1000
        self.pool: Any = None

    async def open(self) -> None:
        import asyncpg

        dsn = self.url.replace("postgresql+asyncpg://", "postgresql://")
        self.pool = await asyncpg.create_pool(dsn, min_size=4, max_size=self.pool_size)

    async def close(self) -> None:
        await self.pool.close()

    async def run(self, session_id: str, text: str) -> dict[str, Any]:
        run_id = f"run_{uuid.uuid4().hex}"
        b, t = self.batches, self.tenant
        now = datetime.now(UTC)
        async with self.pool.acquire() as c:
            await c.fetchrow(
                _PG_START, t, session_id, run_id, MAX_LIVE, now, "bare", now + LEASE,
                json.dumps(text), json.dumps(b.options), None, None, b.json_array(0, run_id),
                None, None, None,
            )  # fmt: skip
        now = datetime.now(UTC)
        async with self.pool.acquire() as c:
            await c.fetchrow(
                _PG_STEP, t, session_id, run_id, 1, now, now + LEASE, 1, json.dumps(b.usage),
                False, None, None, None, None, b.json_array(1, run_id),
            )  # fmt: skip
        if self.model_seconds:
            await asyncio.sleep(self.model_seconds)
        now = datetime.now(UTC)
        async with self.pool.acquire() as c:
            row = await c.fetchrow(
                _PG_STEP, t, session_id, run_id, 1, now, now + LEASE, 1, json.dumps(b.usage),
                True, "finished", "COMPLETED", b.output, None, b.json_array(2, run_id),
            )  # fmt: skip
        return {"run_id": run_id, "session_id": session_id, "status": "finished",
                "output": b.output, "last_seq": row["o_session"]["last_seq"]}  # fmt: skip


def _ts(value: datetime) -> str:
    """A timestamp as SQLAlchemy stores DateTime on SQLite."""
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


_SQ_COUNT = "SELECT count(*) FROM runs WHERE tenant_id = ? AND status IN ('queued', 'running')"
_SQ_CLAIM = (
    "UPDATE sessions SET active_run_id = ?, status = 'running', last_seq = last_seq + ?,"
    " version = version + 1, updated_at = ? WHERE tenant_id = ? AND session_id = ?"
    " AND active_run_id IS NULL RETURNING *"
)
_SQ_RUN = (
    "INSERT INTO runs (tenant_id, run_id, session_id, status, input, options, usage, turns,"
    " first_seq, last_seq, idempotency_key, epoch, lease_owner, lease_expires_at, created_at,"
    " started_at, updated_at) VALUES (?, ?, ?, 'running', ?, ?, '{}', 0, ?, ?, NULL, 1, ?, ?,"
    " ?, ?, ?) RETURNING *"
)
_SQ_RESERVE = (
    "UPDATE sessions SET last_seq = last_seq + ?, version = version + 1, updated_at = ?,"
    " active_run_id = CASE WHEN ? AND active_run_id = ? THEN NULL ELSE active_run_id END,"
    " status = CASE WHEN ? AND active_run_id = ? THEN 'idle' ELSE status END"
    " WHERE tenant_id = ? AND session_id = ? RETURNING *"
)
_SQ_STEP = (
    "UPDATE runs SET lease_expires_at = ?, updated_at = ?, last_seq = ?, turns = ?, usage = ?,"
    " status = ?, stop_reason = ?, output = ?, finished_at = ?"
    " WHERE tenant_id = ? AND run_id = ? AND epoch = ? AND status = 'running' RETURNING *"
)
_SQ_POSITIONS = (
    "INSERT INTO counters (name, value) VALUES ('event_position', ?) ON CONFLICT (name)"
    " DO UPDATE SET value = counters.value + ? RETURNING value"
)
_SQ_EVENT_ROW = "(?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?)"
_SQ_EVENTS = (
    "INSERT INTO session_events (tenant_id, session_id, seq, event_id, xact_id, type, run_id,"
    " turn_id, payload, created_at, position) VALUES "
)


class SqliteWrites:
    """The same statements the SQLite store sends for an echo run, on one writer
    connection (the store's writers queue on one lock too)."""

    def __init__(self, url: str, tenant: str, batches: Batches, model_ms: int = 0) -> None:
        self.path = url.split("///", 1)[1]
        self.tenant, self.batches = tenant, batches
        self.model_seconds = model_ms / 1000
        self.lock = asyncio.Lock()
        self.db: Any = None

    async def open(self) -> None:
        import aiosqlite

        self.db = await aiosqlite.connect(self.path, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=10000",
                       "foreign_keys=ON"):  # fmt: skip
            await self.db.execute(f"PRAGMA {pragma}")

    async def close(self) -> None:
        await self.db.close()

    async def _events(self, session_id: str, last_seq: int, run_id: str, index: int,
                      now: str) -> None:  # fmt: skip
        rows = self.batches.rows(index, run_id)
        n = len(rows)
        async with self.db.execute(_SQ_POSITIONS, (n, n)) as cur:
            top = (await cur.fetchone())[0]
        params: list[Any] = []
        for i, (eid, type_, turn, payload) in enumerate(rows):
            params += [self.tenant, session_id, last_seq - n + 1 + i, eid, type_, run_id, turn,
                       payload, now, top - n + 1 + i]  # fmt: skip
        sql = _SQ_EVENTS + ",".join([_SQ_EVENT_ROW] * n) + " RETURNING position"
        async with self.db.execute(sql, params) as cur:
            await cur.fetchall()

    async def _write(self, work: Any) -> Any:
        async with self.lock:
            await self.db.execute("BEGIN IMMEDIATE")
            try:
                result = await work()
            except BaseException:
                await self.db.execute("ROLLBACK")
                raise
            await self.db.execute("COMMIT")
            return result

    async def run(self, session_id: str, text: str) -> dict[str, Any]:
        run_id = f"run_{uuid.uuid4().hex}"
        b, t = self.batches, self.tenant

        async def start() -> None:
            now = datetime.now(UTC)
            n = len(b.batches[0])
            async with self.db.execute(_SQ_COUNT, (t,)) as cur:
                await cur.fetchone()
            async with self.db.execute(_SQ_CLAIM, (run_id, n, _ts(now), t, session_id)) as cur:
                last = (await cur.fetchone())["last_seq"]
            async with self.db.execute(
                _SQ_RUN,
                (t, run_id, session_id, json.dumps(text), json.dumps(b.options), last - n + 1,
                 last, "bare", _ts(now + LEASE), _ts(now), _ts(now), _ts(now)),
            ) as cur:  # fmt: skip
                await cur.fetchone()
            await self._events(session_id, last, run_id, 0, _ts(now))

        async def step(index: int, finish: bool) -> int:
            now = datetime.now(UTC)
            n = len(b.batches[index])
            async with self.db.execute(
                _SQ_RESERVE, (n, _ts(now), finish, run_id, finish, run_id, t, session_id)
            ) as cur:
                last = (await cur.fetchone())["last_seq"]
            async with self.db.execute(
                _SQ_STEP,
                (None if finish else _ts(now + LEASE), _ts(now), last, 1, json.dumps(b.usage),
                 "finished" if finish else "running", "COMPLETED" if finish else None,
                 b.output if finish else None, _ts(now) if finish else None, t, run_id, 1),
            ) as cur:  # fmt: skip
                await cur.fetchone()
            await self._events(session_id, last, run_id, index, _ts(now))
            return int(last)

        await self._write(start)
        await self._write(lambda: step(1, False))
        if self.model_seconds:
            await asyncio.sleep(self.model_seconds)
        last = await self._write(lambda: step(2, True))
        return {"run_id": run_id, "session_id": session_id, "status": "finished",
                "output": b.output, "last_seq": last}  # fmt: skip


def writes_app(url: str, tenant: str, events: Path, pool_size: int, model_ms: int = 0) -> FastAPI:
    """The same-writes baseline app (see the module docstring)."""
    batches = Batches(events)
    writes: PgWrites | SqliteWrites = (
        SqliteWrites(url, tenant, batches, model_ms)
        if url.startswith("sqlite")
        else PgWrites(url, tenant, batches, pool_size, model_ms)
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await writes.open()
        try:
            yield
        finally:
            await writes.close()

    bare = FastAPI(lifespan=lifespan)

    @bare.post("/v1/sessions/{session_id}/runs")
    async def run_writes(session_id: str, request: Request) -> dict[str, Any]:
        body = await request.json()
        return await writes.run(session_id, body.get("input") or "")

    @bare.post("/run")
    async def ready() -> dict[str, str]:
        return {"status": "ready"}

    return bare


def frames_app(path: Path) -> FastAPI:
    """The bare SSE baseline app (see the module docstring)."""
    doc = json.loads(path.read_text())
    frames = [(f.encode(), f.startswith("event: delta")) for f in doc["frames"]]
    pace = doc["pace_ms"] / 1000
    bare = FastAPI()

    async def body() -> AsyncIterator[bytes]:
        first = True
        for frame, delta in frames:
            if delta:
                if not first:
                    await asyncio.sleep(pace)
                first = False
            yield frame

    @bare.post("/sse")
    async def sse() -> StreamingResponse:
        return StreamingResponse(body(), media_type="text/event-stream")

    @bare.post("/run")
    async def ready() -> dict[str, str]:
        return {"status": "ready"}

    return bare


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bare_app")
    parser.add_argument("port", type=int)
    parser.add_argument("--writes", default=None, help="database URL: the same-writes app")
    parser.add_argument("--tenant", default=None)
    parser.add_argument("--events", type=Path, default=None)
    parser.add_argument("--pool-size", type=int, default=72)
    parser.add_argument("--model-ms", type=int, default=0, help="the model's latency (--writes)")
    parser.add_argument("--frames", type=Path, default=None, help="recorded SSE frames (JSON)")
    args = parser.parse_args()
    served = app
    if args.writes:
        served = writes_app(args.writes, args.tenant, args.events, args.pool_size, args.model_ms)
    elif args.frames:
        served = frames_app(args.frames)
    uvicorn.run(served, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
