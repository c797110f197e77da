"""Retries of a profile's model calls: rate limits and outages, with bounded backoff.

The SDKs' own retries are turned off (`max_retries=0`) so that every provider follows one
policy, the profile's: exponential backoff from `initial_backoff_seconds`, never shorter
than the provider's retry hint and never longer than `max_backoff_seconds`, for at most
`max_attempts` calls. A hint longer than that cap stops at once (waiting less than the
provider asked for would only be refused again). A call that already streamed deltas to
live subscribers is not retried: a second attempt would repeat them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from app.runtime.models.base import ModelClient, ModelRequest, ModelResponse, OnDelta
from app.runtime.models.failures import ProviderError
from app.runtime.models.profiles import RetryPolicy

log = logging.getLogger("app.models")

Sleep = Callable[[float], Awaitable[None]]


class RetryingModel:
    """`inner`, retried per `policy` on retryable provider failures."""

    def __init__(
        self,
        inner: ModelClient,
        *,
        profile: str,
        policy: RetryPolicy,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.inner = inner
        self.profile = profile
        self.policy = policy
        self.sleep = sleep

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        streamed = False

        def watch(frame: dict[str, Any]) -> None:
            nonlocal streamed
            streamed = True
            on_delta(frame)

        backoff = self.policy.initial_backoff_seconds
        for attempt in range(1, self.policy.max_attempts + 1):
            try:
                return await self.inner.complete(request, watch)
            except ProviderError as exc:
                wait = self._wait(exc, attempt, backoff, streamed)
                if wait is None:
                    raise
                log.warning(
                    "profile %s: %s; retrying in %.2f s (attempt %d of %d)",
                    self.profile,
                    exc.code,
                    wait,
                    attempt + 1,
                    self.policy.max_attempts,
                )
                await self.sleep(wait)
                backoff = min(backoff * 2, self.policy.max_backoff_seconds)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _wait(
        self, exc: ProviderError, attempt: int, backoff: float, streamed: bool
    ) -> float | None:
        """How long to wait before the next attempt, or None to give up (and why, in exc)."""
        if not exc.retryable or streamed:
            return None
        hint = exc.retry_after
        if attempt >= self.policy.max_attempts:
            exc.detail = f"{exc.detail}; gave up after {attempt} attempts"
            exc.args = (exc.detail,)
            return None
        if hint is not None and hint > self.policy.max_backoff_seconds:
            exc.detail = (
                f"{exc.detail}; the provider asks to wait {hint:.0f} s, more than the "
                f"profile's max_backoff_seconds ({self.policy.max_backoff_seconds:.0f})"
            )
            exc.args = (exc.detail,)
            return None
        return min(max(backoff, hint or 0.0), self.policy.max_backoff_seconds)
