"""One fault run: replicas up, writers busy, a fault injected meanwhile, then the audit.

An injector makes one kind of fault while the writers work, and says how many it made;
the writers go on past their target until it has made the few it needs, so that a quick
run (ASR_FAULT_WRITES=150) still meets its fault. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass
from typing import Protocol

import httpx

from tests.faults.audit import Verdict, audit
from tests.faults.cluster import PgCluster
from tests.faults.proxy import ReplyDropProxy
from tests.faults.replicas import Replica, start_all
from tests.faults.workload import WRITE_SECONDS, Budget, Tally, writer

WRITERS = 16
LOAD_SECONDS = 480.0  # no new write is started after this; the target is normally met far sooner


def fault_writes() -> int:
    """Acknowledged appends and runs per fault kind (ASR_FAULT_WRITES, default 1000)."""
    return int(os.environ.get("ASR_FAULT_WRITES", "1000"))


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep `seconds`; True when `stop` was set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True


class Injector(Protocol):
    """One kind of fault. `inject` runs beside the writers until `stop` is set; `count`
    is how many faults it made and `needed` how many the run must have; `quiesce` ends
    the fault before the audit, whose reads must not meet it."""

    name: str
    needed: int

    @property
    def count(self) -> int: ...

    async def inject(self, budget: Budget, stop: asyncio.Event) -> None: ...

    def quiesce(self) -> None: ...

    def describe(self) -> str: ...


class KillReplicas:
    """kill -9 of a replica every 5 to 15 s (the first after 2 to 4 s), started again at once."""

    name = "kill -9 of a replica"
    needed = 1

    def __init__(self, replicas: list[Replica], *, seed: int = 15) -> None:
        self.replicas = replicas
        self.rng = random.Random(seed)
        self.count = 0

    async def inject(self, budget: Budget, stop: asyncio.Event) -> None:
        delay = self.rng.uniform(2, 4)
        for n in range(1000):
            if await _sleep_or_stop(stop, delay):
                return
            await self.replicas[n % len(self.replicas)].restart()
            self.count += 1
            delay = self.rng.uniform(5, 15)

    def quiesce(self) -> None:
        pass

    def describe(self) -> str:
        return self.name


class RestartPostgres:
    """`pg_ctl restart -m fast` at a third and at two thirds of the target."""

    name = "pg_ctl restart -m fast"
    needed = 2

    def __init__(self, cluster: PgCluster) -> None:
        self.cluster = cluster
        self.count = 0

    async def inject(self, budget: Budget, stop: asyncio.Event) -> None:
        for n in range(self.needed):
            mark = budget.target * (n + 1) / (self.needed + 1)
            while budget.acked < mark:  # bounded: `stop` is set when the writers end
                if await _sleep_or_stop(stop, 0.2):
                    return
            await asyncio.to_thread(self.cluster.restart)
            self.count += 1

    def quiesce(self) -> None:
        pass

    def describe(self) -> str:
        return self.name


class DropCommitReplies:
    """The proxy loses commit replies on its own; this only counts them and stops them."""

    name = "lost commit replies"
    needed = 1

    def __init__(self, proxy: ReplyDropProxy) -> None:
        self.proxy = proxy

    @property
    def count(self) -> int:
        return self.proxy.drops

    async def inject(self, budget: Budget, stop: asyncio.Event) -> None:
        await stop.wait()

    def quiesce(self) -> None:
        self.proxy.probability = 0.0  # the audit's reads must not be cut off

    def describe(self) -> str:
        tags = ", ".join(f"{tag} {n}" for tag, n in self.proxy.dropped.most_common())
        return f"{self.name}: {tags}" if tags else self.name


@dataclass
class Outcome:
    label: str
    fault: str
    faults: int
    tally: Tally
    verdict: Verdict
    seconds: float

    def summary(self) -> str:
        t, v = self.tally, self.verdict
        return (
            f"issue-15 {self.label}: acknowledged={t.acknowledged('append', 'run')} "
            f"(appends={t.acknowledged('append')} runs={t.acknowledged('run')} "
            f"sessions={t.acknowledged('create')}) duplicates={v.duplicates} lost={v.lost} "
            f"unacknowledged={v.unacknowledged} retries={t.retries} "
            f"faults={self.faults} ({self.fault}) gaps={v.gaps} "
            f"projection_mismatches={v.projections} bad_replays={v.replays} "
            f"unsettled={v.unsettled} seconds={self.seconds:.0f}"
        )

    def details(self) -> str:
        causes = ", ".join(f"{c}: {n}" for c, n in self.tally.causes.most_common(8))
        lines = [self.summary(), f"retry causes: {causes}", *self.tally.refusals[:5]]
        return "\n".join(lines + self.verdict.problems)


def report(outcome: Outcome) -> None:
    """Print the one-line summary (and append it to ASR_FAULT_SUMMARY, a file, if set)."""
    print(outcome.summary(), flush=True)
    path = os.environ.get("ASR_FAULT_SUMMARY")
    if path:
        with open(path, "a") as out:
            out.write(outcome.summary() + "\n")


async def exercise(
    label: str, replicas: list[Replica], api_key: str, injector: Injector, *, writes: int
) -> Outcome:
    """Start the replicas, run WRITERS writers until `writes` are acknowledged while
    `injector` makes its faults, stop the faults, audit; the replicas are stopped after."""
    started = time.monotonic()
    # Idle connections are dropped before uvicorn's 5 s keep-alive timeout closes them.
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=32, keepalive_expiry=2)
    clients = [
        httpx.AsyncClient(
            base_url=r.base_url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(30, connect=3),
            limits=limits,
        )
        for r in replicas
    ]
    try:
        await start_all(replicas)
        tally = Tally()
        stop = asyncio.Event()
        budget = Budget(
            writes,
            deadline=started + LOAD_SECONDS,
            ready=lambda: injector.count >= injector.needed,
        )
        faults = asyncio.create_task(injector.inject(budget, stop))
        try:
            writers = [writer(n, clients, budget, tally) for n in range(WRITERS)]
            await asyncio.wait_for(asyncio.gather(*writers), LOAD_SECONDS + WRITE_SECONDS + 60)
        finally:
            stop.set()
            await asyncio.wait_for(faults, 120)
        injector.quiesce()
        for replica in replicas:
            if replica.process is None or replica.process.poll() is not None:
                await replica.start()
        verdict = await audit(clients, tally)
    finally:
        for client in clients:
            await client.aclose()
        for replica in replicas:
            await asyncio.to_thread(replica.stop)
    outcome = Outcome(
        label, injector.describe(), injector.count, tally, verdict, time.monotonic() - started
    )
    report(outcome)
    return outcome


def expect_exactly_once(outcome: Outcome, replicas: list[Replica]) -> None:
    """The test's verdict; on failure the message carries the numbers and the log paths."""
    logs = ", ".join(str(r.log_path) for r in replicas)
    assert outcome.faults >= 1, f"no fault was injected\n{outcome.details()}"
    assert outcome.verdict.clean, f"{outcome.details()}\nreplica logs: {logs}"
    assert not outcome.tally.refusals, outcome.details()
