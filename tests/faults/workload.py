"""Writers of keyed requests that retry the same request until it is acknowledged.

Every logical write has its own `Idempotency-Key` and a unique marker in its body; the
body is serialized once, so each retry sends the very same bytes. A writer retries on
connection errors, timeouts, 409, 429, 503 and every 5xx — on either replica, honouring a
capped `Retry-After` — until the first 2xx, which makes the write acknowledged. Each writer
owns its sessions and writes to them one request at a time, so at most one of its runs is
active per session, and a 409 `run_in_progress` only comes from its own earlier attempt.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

MAX_ATTEMPTS = 400
WRITE_SECONDS = 150.0  # one write's retry budget: well above the 3 s run lease
RETRY_AFTER_CAP = 2.0
SESSIONS_PER_WRITER = 2


@dataclass
class Write:
    """One logical write: a keyed POST, sent again unchanged until a 2xx."""

    kind: str  # "create", "append" or "run"
    key: str
    marker: str
    path: str
    body: bytes
    session_id: str | None = None
    status: int | None = None
    response: bytes = b""
    attempts: int = 0
    replayed: bool = False  # the acknowledgement was itself a replay

    @property
    def acknowledged(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def _new_write(kind: str, path: str, body: Callable[[str], Any], sid: str | None) -> Write:
    key = uuid.uuid4().hex
    marker = f"fx-{kind}-{key}"
    return Write(kind, key, marker, path, json.dumps(body(marker)).encode(), session_id=sid)


def _create_body(marker: str) -> dict[str, Any]:
    return {"metadata": {"fx": marker}}


def _append_body(marker: str) -> dict[str, Any]:
    return {"items": [{"type": "message", "role": "user", "content": marker}]}


def _run_body(marker: str) -> dict[str, Any]:
    return {"input": marker, "mode": "wait"}


def create_write() -> Write:
    """A keyed session create; the marker in its metadata finds every copy it made."""
    return _new_write("create", "/v1/sessions", _create_body, None)


def append_write(sid: str) -> Write:
    """A keyed append of one user message whose content is the marker."""
    return _new_write("append", f"/v1/sessions/{sid}/items", _append_body, sid)


def run_write(sid: str) -> Write:
    """A keyed wait-mode run whose input is the marker (the scripted model echoes it)."""
    return _new_write("run", f"/v1/sessions/{sid}/runs", _run_body, sid)


@dataclass
class Tally:
    """What the writers did: every write, retries, and what made them retry."""

    writes: list[Write] = field(default_factory=list)
    retries: int = 0
    causes: Counter[str] = field(default_factory=Counter)
    refusals: list[str] = field(default_factory=list)  # answers that are not worth a retry

    def acknowledged(self, *kinds: str) -> int:
        return sum(1 for w in self.writes if w.acknowledged and w.kind in kinds)


class Budget:
    """Hands out writes until `target` are acknowledged and the fault needs no more time.

    Bounded twice over: never more than three times the target issued, never past the
    deadline."""

    def __init__(self, target: int, *, deadline: float, ready: Callable[[], bool]) -> None:
        self.target = target
        self.deadline = deadline
        self.ready = ready  # True once enough faults were injected
        self.acked = 0
        self.in_flight = 0
        self.issued = 0

    def take(self) -> bool:
        if time.monotonic() > self.deadline or self.issued >= 3 * self.target:
            return False
        if self.acked + self.in_flight >= self.target and self.ready():
            return False
        self.in_flight += 1
        self.issued += 1
        return True

    def settle(self, acknowledged: bool) -> None:
        self.in_flight -= 1
        self.acked += int(acknowledged)


def _backoff(attempt: int, rng: random.Random) -> float:
    return min(1.0, 0.05 * 2**attempt) * rng.uniform(0.5, 1.5)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return min(RETRY_AFTER_CAP, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None


def _cause(response: httpx.Response) -> str:
    try:
        code = response.json().get("code")
    except ValueError:
        code = None
    return f"{response.status_code} {code or ''}".strip()


async def send(
    write: Write, clients: list[httpx.AsyncClient], first: int, tally: Tally, rng: random.Random
) -> None:
    """Send `write` until a 2xx (bounded by MAX_ATTEMPTS and WRITE_SECONDS), alternating
    replicas from `clients[first]`; the answer lands on the write."""
    headers = {"Idempotency-Key": write.key, "Content-Type": "application/json"}
    started = time.monotonic()
    for attempt in range(MAX_ATTEMPTS):
        if time.monotonic() - started > WRITE_SECONDS:
            return
        if attempt:
            tally.retries += 1
        write.attempts += 1
        client = clients[(first + attempt) % len(clients)]
        try:
            response = await client.post(write.path, content=write.body, headers=headers)
        except httpx.TransportError as exc:
            tally.causes[type(exc).__name__] += 1
            await asyncio.sleep(_backoff(attempt, rng))
            continue
        if response.is_success:
            write.status, write.response = response.status_code, response.content
            write.replayed = response.headers.get("idempotent-replayed") == "true"
            return
        tally.causes[_cause(response)] += 1
        if response.status_code in (409, 429, 503) or response.status_code >= 500:
            await asyncio.sleep(_retry_after(response) or _backoff(attempt, rng))
            continue
        write.status, write.response = response.status_code, response.content
        tally.refusals.append(f"{write.kind} {write.key}: {response.status_code} {response.text}")
        return


async def writer(n: int, clients: list[httpx.AsyncClient], budget: Budget, tally: Tally) -> None:
    """Create this writer's sessions, then alternate appends and runs over them (and over
    the replicas) while the budget lasts."""
    rng = random.Random(n)
    sessions: list[str] = []
    for s in range(SESSIONS_PER_WRITER):
        create = create_write()
        tally.writes.append(create)
        await send(create, clients, n + s, tally, rng)
        if not create.acknowledged:
            return
        sessions.append(json.loads(create.response)["session_id"])
    k = 0
    while budget.take():
        sid = sessions[k % len(sessions)]
        write = run_write(sid) if (k // len(sessions)) % 2 else append_write(sid)
        tally.writes.append(write)
        try:
            await send(write, clients, n + k, tally, rng)
        finally:
            budget.settle(write.acknowledged)
        k += 1
