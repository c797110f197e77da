"""Webhook retries back off exponentially, capped, with full jitter (issue #20)."""

from __future__ import annotations

import random

from app.runtime.webhooks.delivery import DeliveryPolicy, backoff


def test_the_ceiling_doubles_up_to_the_cap_and_jitter_stays_under_it() -> None:
    policy = DeliveryPolicy(backoff_base_seconds=5, backoff_cap_seconds=3600)
    assert [backoff(n, policy, rand=lambda: 1.0) for n in (1, 2, 3, 4)] == [5, 10, 20, 40]
    assert backoff(30, policy, rand=lambda: 1.0) == 3600
    assert backoff(10**6, policy, rand=lambda: 1.0) == 3600  # no overflow, however many
    rng = random.Random(20)
    delays = [backoff(6, policy, rand=rng.random) for _ in range(200)]
    assert all(0.5 <= d <= 160 for d in delays) and len(set(delays)) > 150


def test_a_days_retries_take_a_bounded_number_of_attempts() -> None:
    """With the defaults, retrying for a day at full ceilings costs about 30 attempts."""
    policy = DeliveryPolicy()
    elapsed, attempts = 0.0, 0
    while elapsed < policy.retry_window_seconds:
        attempts += 1
        elapsed += backoff(attempts, policy, rand=lambda: 1.0)
    assert 20 <= attempts <= 40
