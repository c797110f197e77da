"""The per-tenant session cap counts a tenant's sessions only when a create may reach it."""

from __future__ import annotations

from app.runtime.session.quota import SessionQuota


class Counter:
    """A tenant's sessions as the store would count them, and how often it was asked."""

    def __init__(self, sessions: int) -> None:
        self.sessions = sessions
        self.asked = 0

    async def __call__(self, tenant_id: str) -> int:
        self.asked += 1
        return self.sessions


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _create(quota: SessionQuota, counter: Counter, tenant: str = "t") -> bool:
    if not await quota.admits(tenant):
        return False
    counter.sessions += 1
    quota.created(tenant)
    return True


async def test_far_below_the_cap_a_count_is_trusted_for_a_while() -> None:
    counter, clock = Counter(10), Clock()
    quota = SessionQuota(counter, 1000, trust_seconds=5, clock=clock)
    for _ in range(50):
        assert await _create(quota, counter)
    assert counter.asked == 1
    clock.now = 5.0  # the count has aged out: counted again
    assert await _create(quota, counter)
    assert counter.asked == 2


async def test_near_the_cap_every_create_counts_and_the_cap_holds() -> None:
    counter, clock = Counter(0), Clock()
    quota = SessionQuota(counter, 100, trust_seconds=60, clock=clock)
    made = 0
    while await _create(quota, counter):
        made += 1
        assert made <= 100
    assert made == 100 and counter.sessions == 100
    # Counted once at the start, then at every create from 90 on (cap less a tenth).
    assert counter.asked == 1 + 11


async def test_a_small_cap_is_always_counted_and_sessions_deleted_elsewhere_free_it() -> None:
    counter, clock = Counter(0), Clock()
    quota = SessionQuota(counter, 2, trust_seconds=60, clock=clock)
    assert await _create(quota, counter) and await _create(quota, counter)
    assert not await _create(quota, counter)
    counter.sessions = 1  # one deleted (on another replica, say)
    assert await _create(quota, counter)
    assert counter.asked == 4


async def test_creates_on_other_replicas_are_seen_at_the_next_count() -> None:
    counter, clock = Counter(0), Clock()
    quota = SessionQuota(counter, 1000, trust_seconds=5, clock=clock)
    assert await _create(quota, counter)
    counter.sessions = 995  # others filled the tenant meanwhile
    clock.now = 6.0
    assert await _create(quota, counter)  # 995 counted: near the cap, counted each time now
    for _ in range(4):
        assert await _create(quota, counter)
    assert not await _create(quota, counter)
    assert counter.sessions == 1000
