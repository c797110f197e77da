"""SQLite's writer (app/store/sqlite/writer.py): concurrent writes share one transaction, and
each is still all-or-nothing on its own, with its own result or error.

Only SQLite has this writer; on PostgreSQL the same promise is group commit's
(tests/store/postgres/test_group_commit.py).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from app.runtime.errors import IdempotentReplay, SeqConflict, SessionNotFound
from app.runtime.ports import IdempotencyToken, NewSession, Wakeup
from app.runtime.session.events import EventType, NewEvent
from app.store.sqlite.writer import SqliteWriter, _reap, _retire
from app.store.stores import Stores
from tests.conftest import TenantKey


def step(i: int) -> NewEvent:
    return NewEvent(EventType.STEP_END, {"i": i}, "run_1", f"t{i}")


async def test_concurrent_writes_share_a_transaction_and_fail_alone(
    sqlite_store: Stores, tenant: TenantKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, t = sqlite_store, tenant.tenant_id
    for sid in ("a", "b"):
        await store.ledger.create_session(
            t, session=NewSession(sid, {}, {}, {}), events=[NewEvent(EventType.SESSION_CREATED, {})]
        )
    batches: list[int] = []
    transact = SqliteWriter._transact

    def recording(self: SqliteWriter, jobs: list[Any]) -> Any:
        batches.append(len(jobs))
        return transact(self, jobs)

    monkeypatch.setattr(SqliteWriter, "_transact", recording)
    key = IdempotencyToken(key="k1", request_hash="h")
    writes = [
        *(store.ledger.append_events(t, "a", events=[step(i)]) for i in range(10)),
        store.ledger.append_events(t, "missing", events=[step(0)]),  # no such session
        store.ledger.append_events(t, "b", events=[step(0)], expected_seq=7),  # stale
        store.ledger.append_events(t, "b", events=[step(1)], idempotency=key),
        store.ledger.append_events(t, "b", events=[step(2)], idempotency=key),  # same key
        *(store.ledger.append_events(t, "b", events=[step(i), step(i)]) for i in range(3, 6)),
    ]
    outcomes = await asyncio.gather(*writes, return_exceptions=True)

    assert max(batches) > 1  # they did share transactions
    assert isinstance(outcomes[10], SessionNotFound)
    assert isinstance(outcomes[11], SeqConflict)
    assert isinstance(outcomes[13], IdempotentReplay)  # the first with the key committed
    failed = {i for i, o in enumerate(outcomes) if isinstance(o, BaseException)}
    assert failed == {10, 11, 13}
    a = await store.ledger.list_events(t, "a")
    b = await store.ledger.list_events(t, "b")
    assert [e.seq for e in a] == list(range(1, 12))  # gapless: the failures took no seq
    assert [e.seq for e in b] == list(range(1, 9))  # 1 + the keyed one + three pairs
    session_b = await store.ledger.get_session(t, "b")
    assert session_b is not None and session_b.last_seq == 8
    # Each caller got its own events back, numbered as stored.
    stored = {e.event_id: e.seq for e in a + b}
    for outcome in outcomes:
        if not isinstance(outcome, BaseException):
            assert all(stored[e.event_id] == e.seq for e in outcome.events)


@pytest.mark.parametrize("queued", [False, True], ids=["alone", "queued"])
async def test_a_write_whose_caller_was_cancelled_is_still_announced(
    sqlite_store: Stores, tenant: TenantKey, monkeypatch: pytest.MonkeyPatch, queued: bool
) -> None:
    """The thread finishes a transaction whatever happens to its caller; the commit's
    wake-up must not be lost with the caller, or live subscribers would wait for a poll."""
    store, t = sqlite_store, tenant.tenant_id
    sid = f"cancelled-{queued}"
    await store.ledger.create_session(
        t, session=NewSession(sid, {}, {}, {}), events=[NewEvent(EventType.SESSION_CREATED, {})]
    )
    entered, release = threading.Event(), threading.Event()
    transact = SqliteWriter._transact

    def held(self: SqliteWriter, jobs: list[Any]) -> Any:
        entered.set()
        assert release.wait(30)
        return transact(self, jobs)

    monkeypatch.setattr(SqliteWriter, "_transact", held)
    heard: list[Wakeup] = []
    store.database.announcer.listeners.append(heard.append)
    try:
        first = asyncio.create_task(store.ledger.append_events(t, sid, events=[step(1)]))
        await asyncio.to_thread(entered.wait, 30)
        # Alone: the cancelled caller is the one whose transaction runs. Queued: it waits
        # behind `first` and is cancelled before its batch even starts.
        victim = first
        if queued:
            victim = asyncio.create_task(store.ledger.append_events(t, sid, events=[step(2)]))
            await asyncio.sleep(0)
        victim.cancel()
        await asyncio.sleep(0)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await victim
        expected = 3 if queued else 2
        for _ in range(200):
            if any(w.session_id == sid and w.last_seq == expected for w in heard):
                break
            await asyncio.sleep(0.01)
        if queued:
            await first
    finally:
        store.database.announcer.listeners.remove(heard.append)
    assert [e.seq for e in await store.ledger.list_events(t, sid)] == list(range(1, expected + 1))
    assert any(w.session_id == sid and w.last_seq == expected for w in heard), heard


def test_a_collected_writer_is_closed_at_a_safe_point_not_by_the_collector() -> None:
    """The finalizer of a collected store may run inside another executor's `submit()`,
    which holds `concurrent.futures`' global lock: it must not submit, or it waits for that
    lock forever (the suite's main thread hung so, in CI). It only queues the close, which
    the next writer made or used carries out."""
    import concurrent.futures.thread as futures_thread

    executor = ThreadPoolExecutor(max_workers=1)
    closed: list[str] = []
    done = threading.Event()

    def retire_inside_a_submit() -> None:
        with futures_thread._global_shutdown_lock:  # as inside another submit()
            _retire(executor, lambda: closed.append("closed"))
        done.set()

    # In a thread of its own, so that a regression fails this test instead of hanging it.
    threading.Thread(target=retire_inside_a_submit, daemon=True).start()
    assert done.wait(10), "the finalizer blocked on concurrent.futures' global lock"
    assert closed == []
    _reap()
    executor.shutdown(wait=True)
    assert closed == ["closed"]
