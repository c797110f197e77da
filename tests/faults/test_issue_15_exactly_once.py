"""Issue #15: a keyed write happens exactly once under faults.

The bug: an `Idempotency-Key` request was three transactions — claim the key, do the work,
record the response. A crash (kill -9) or a lost commit reply between the work and the
record left the key unfinished, and the client's retry did the work a second time. These
tests drive ~1,000 keyed appends and wait-mode runs (ASR_FAULT_WRITES) through real
`asr serve` replicas while one kind of fault is injected, retry each write with its key
until a 2xx, and then check every acknowledged write is in its ledger exactly once.

    ASR_TEST_DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1/postgres \\
        pytest -s tests/faults            # the PostgreSQL fault kinds
    pytest -s tests/faults                # the SQLite one
    ASR_FAULT_WRITES=150 pytest -s ...    # a quick form

Each test prints one summary line (acknowledged, duplicates, lost, retries, faults); with
ASR_FAULT_SUMMARY=FILE the lines are also appended to FILE.

A key is recorded in the transaction of the work it guards, so a killed replica leaves no
claim behind that could stall a retry; the lock-out itself is the subject of
test_issue_15_no_lockout.py.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.faults.cluster import PgCluster, create_database
from tests.faults.proxy import ReplyDropProxy
from tests.faults.replicas import Replica, asr_cli, make_api_key
from tests.faults.scenario import (
    DropCommitReplies,
    KillReplicas,
    RestartPostgres,
    exercise,
    expect_exactly_once,
    fault_writes,
)

DROP_PROBABILITY = 0.008  # of the finished statements whose reply is lost

pytestmark = pytest.mark.timeout(1200)


async def _database(cluster: PgCluster) -> tuple[str, str]:
    """(app role URL, API key) of a fresh migrated database on the cluster."""
    roles = await asyncio.to_thread(create_database, cluster, f"asr_faults_{uuid.uuid4().hex[:8]}")
    return roles.app_url, await asyncio.to_thread(make_api_key, roles.app_url)


def _pair(tmp_path: Path, env: dict[str, str]) -> list[Replica]:
    return [Replica(name, env, tmp_path / f"{name}.log") for name in ("a", "b")]


async def test_kill9_of_replicas_on_postgres(pg_cluster: PgCluster, tmp_path: Path) -> None:
    url, key = await _database(pg_cluster)
    replicas = _pair(tmp_path, {"ASR_DATABASE_URL": url})
    outcome = await exercise(
        "kill -9, PostgreSQL", replicas, key, KillReplicas(replicas), writes=fault_writes()
    )
    expect_exactly_once(outcome, replicas)


async def test_kill9_of_the_replica_on_sqlite(sqlite_tier: None, tmp_path: Path) -> None:
    """One replica on one SQLite file, killed and started again on the same file."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'faults.db'}"
    await asyncio.to_thread(asr_cli, url, "migrate")
    key = await asyncio.to_thread(make_api_key, url)
    replicas = [Replica("a", {"ASR_DATABASE_URL": url}, tmp_path / "a.log")]
    outcome = await exercise(
        "kill -9, SQLite", replicas, key, KillReplicas(replicas), writes=fault_writes()
    )
    expect_exactly_once(outcome, replicas)


async def test_postgres_restarts(pg_cluster: PgCluster, tmp_path: Path) -> None:
    url, key = await _database(pg_cluster)
    replicas = _pair(tmp_path, {"ASR_DATABASE_URL": url})
    outcome = await exercise(
        "PostgreSQL restart", replicas, key, RestartPostgres(pg_cluster), writes=fault_writes()
    )
    expect_exactly_once(outcome, replicas)


async def test_lost_commit_replies_on_postgres(pg_cluster: PgCluster, tmp_path: Path) -> None:
    """The replicas reach PostgreSQL through a proxy that loses the reply to a finished
    commit now and then; LISTEN goes direct."""
    url, key = await _database(pg_cluster)
    proxy = ReplyDropProxy(pg_cluster.port, probability=DROP_PROBABILITY)
    await proxy.start()
    proxied = make_url(url).set(port=proxy.port).render_as_string(hide_password=False)
    replicas = _pair(tmp_path, {"ASR_DATABASE_URL": proxied, "ASR_LISTEN_DATABASE_URL": url})
    try:
        outcome = await exercise(
            "lost commit reply", replicas, key, DropCommitReplies(proxy), writes=fault_writes()
        )
    finally:
        await proxy.close()
    expect_exactly_once(outcome, replicas)
