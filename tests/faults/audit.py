"""The checks after a fault run: every acknowledged write is in its ledger exactly once.

Run once the faults have stopped and every run has ended (`settle`). A write's marker is
counted where its work leaves it: an append's user message in MEMORY_ITEMS_APPENDED, a
run's USER_INPUT and its RUN_STARTED, a session create's metadata (found with the
metadata filter of the session list). Ledgers must be gapless (seqs 1..N), every
projection must equal live memory, and a sample of acknowledged requests, sent again with
their keys, must be replayed — twice, with the same status and body both times.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.faults.workload import Tally, Write

REPLAY_SAMPLE = 30
PAGE = 1000


@dataclass
class Verdict:
    duplicates: int = 0  # writes whose work is in the database more than once
    lost: int = 0  # acknowledged writes whose work is not there
    unacknowledged: int = 0  # writes that got no 2xx within their retry budget
    gaps: int = 0  # sessions whose seqs are not exactly 1..N
    projections: int = 0  # sessions whose fold differs from live memory
    replays: int = 0  # sampled writes whose replays were not identical 2xx replays
    unsettled: int = 0  # sessions still running a run when the checks began
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 25:
            self.problems.append(text)

    @property
    def clean(self) -> bool:
        counts = (self.duplicates, self.lost, self.unacknowledged, self.gaps, self.projections)
        return not any(counts) and not self.replays and not self.unsettled


async def _get(client: httpx.AsyncClient, path: str, **params: Any) -> Any:
    """GET with a few retries for a keep-alive connection closed under us."""
    for attempt in range(5):
        try:
            response = await client.get(path, params=params)
            if response.status_code < 500:
                response.raise_for_status()
                return response.json()
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.2 * (attempt + 1))
    raise AssertionError(f"GET {path} kept failing")


async def settle(client: httpx.AsyncClient, sessions: list[str], verdict: Verdict) -> None:
    """Wait (at most 90 s) until no session has an active run: a run cut off by a kill
    ends once its lease expires and a replica's sweeper interrupts it."""
    deadline = time.monotonic() + 90
    waiting = list(sessions)
    while waiting and time.monotonic() < deadline:
        waiting = [
            sid
            for sid in waiting
            if (await _get(client, f"/v1/sessions/{sid}"))["active_run_id"] is not None
        ]
        if waiting:
            await asyncio.sleep(0.5)
    verdict.unsettled = len(waiting)
    for sid in waiting:
        verdict.problem(f"{sid}: a run is still active after 90 s")


async def ledger(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    """Every event of the session, page by page (at most 1000 pages)."""
    events: list[dict[str, Any]] = []
    after = 0
    for _ in range(1000):
        page = await _get(client, f"/v1/sessions/{sid}/events", after_seq=after, limit=PAGE)
        events.extend(page["data"])
        if page["next_after_seq"] is None:
            return events
        after = page["next_after_seq"]
    raise AssertionError(f"{sid}: more than 1000 pages of events")


def marker_counts(events: list[dict[str, Any]]) -> Counter[str]:
    """How often each marker's work is in a ledger, keyed 'append:m', 'input:m', 'start:m'."""
    counts: Counter[str] = Counter()
    for event in events:
        payload = event["payload"]
        if event["type"] == "MEMORY_ITEMS_APPENDED":
            for item in payload["items"]:
                if item.get("role") == "user" and isinstance(item.get("content"), str):
                    counts["append:" + item["content"]] += 1
        elif event["type"] == "USER_INPUT" and isinstance(payload["item"].get("content"), str):
            counts["input:" + payload["item"]["content"]] += 1
        elif event["type"] == "RUN_STARTED" and isinstance(payload.get("input"), str):
            counts["start:" + payload["input"]] += 1
    return counts


def judge(write: Write, copies: list[int], verdict: Verdict) -> None:
    """Note a write's copies (one count per place its work shows) on the verdict."""
    if max(copies) > 1:
        verdict.duplicates += 1
        verdict.problem(f"{write.kind} {write.key}: done {copies} times ({write.attempts} tries)")
    elif write.acknowledged and min(copies) == 0:
        verdict.lost += 1
        verdict.problem(f"{write.kind} {write.key}: acknowledged but {copies} in the ledger")


async def check_session(
    client: httpx.AsyncClient, sid: str, writes: list[Write], verdict: Verdict
) -> None:
    events = await ledger(client, sid)
    seqs = [e["seq"] for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        verdict.gaps += 1
        verdict.problem(f"{sid}: seqs are not 1..{len(seqs)}")
    counts = marker_counts(events)
    for write in writes:
        if write.kind == "append":
            judge(write, [counts["append:" + write.marker]], verdict)
        else:
            copies = [counts["input:" + write.marker], counts["start:" + write.marker]]
            judge(write, copies, verdict)
    projection = await _get(client, f"/v1/sessions/{sid}/projection")
    if projection["equals_live"] is not True or projection["seq"] != len(seqs):
        verdict.projections += 1
        verdict.problem(f"{sid}: projection {projection['seq']} != live or ledger {len(seqs)}")


async def check_creates(client: httpx.AsyncClient, creates: list[Write], verdict: Verdict) -> None:
    for write in creates:
        found = await _get(client, "/v1/sessions", limit=10, **{"metadata.fx": write.marker})
        judge(write, [len(found["data"])], verdict)


async def check_replays(
    clients: list[httpx.AsyncClient], writes: list[Write], verdict: Verdict
) -> None:
    """Send a spread sample of acknowledged writes again, twice (one on each replica when
    there are two): each must be an `Idempotent-Replayed: true` answer with the status
    that acknowledged the write, identical both times."""
    acked = [w for w in writes if w.acknowledged]
    step = max(1, len(acked) // REPLAY_SAMPLE)
    for n, write in enumerate(acked[::step][:REPLAY_SAMPLE]):
        headers = {"Idempotency-Key": write.key, "Content-Type": "application/json"}
        answers = []
        for r in range(2):
            client = clients[(n + r) % len(clients)]
            answers.append(await client.post(write.path, content=write.body, headers=headers))
        first, second = answers
        replayed = all(a.headers.get("idempotent-replayed") == "true" for a in answers)
        same = (first.status_code, first.content) == (second.status_code, second.content)
        if not (first.status_code == write.status and replayed and same):
            verdict.replays += 1
            verdict.problem(
                f"{write.kind} {write.key}: replays {first.status_code}/{second.status_code}, "
                f"replayed={replayed}, identical={same}"
            )


async def audit(clients: list[httpx.AsyncClient], tally: Tally) -> Verdict:
    """All the checks, on `clients[0]` (and the replays on every client)."""
    verdict = Verdict()
    creates = [w for w in tally.writes if w.kind == "create"]
    sessions = [json.loads(w.response)["session_id"] for w in creates if w.acknowledged]
    await settle(clients[0], sessions, verdict)
    by_session: dict[str, list[Write]] = {sid: [] for sid in sessions}
    for write in tally.writes:
        if write.session_id is not None:
            by_session[write.session_id].append(write)
    for sid, writes in by_session.items():
        await check_session(clients[0], sid, writes, verdict)
    await check_creates(clients[0], creates, verdict)
    await check_replays(clients, tally.writes, verdict)
    verdict.unacknowledged = sum(1 for w in tally.writes if not w.acknowledged)
    return verdict
