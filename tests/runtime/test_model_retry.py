"""Issue #19 (2): the profile's retry policy, decided without a clock: the waits it asks
for honour the provider's hint, stay under the cap, and stop when waiting cannot help."""

from __future__ import annotations

from typing import Any

import pytest

from app.runtime.models.base import ModelRequest, ModelResponse, OnDelta
from app.runtime.models.failures import (
    ModelAuthFailed,
    ModelContextTooLong,
    ModelRateLimited,
    ModelUnavailable,
    ProviderError,
    classify,
    retry_after_seconds,
)
from app.runtime.models.profiles import RetryPolicy
from app.runtime.models.retry import RetryingModel

REQUEST = ModelRequest(model="m", instructions=None, items=[], tools=[])


class Failing:
    """Fails with the given errors in turn, then answers; may stream a delta first."""

    def __init__(self, errors: list[ProviderError], *, stream_first: bool = False) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.stream_first = stream_first

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        self.calls += 1
        if self.stream_first:
            on_delta({"type": "delta", "text": "partial"})
        if self.errors:
            raise self.errors.pop(0)
        return ModelResponse(text="ok")


def retrying(inner: Any, waits: list[float], **policy: Any) -> RetryingModel:
    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    return RetryingModel(inner, profile="p", policy=RetryPolicy(**policy), sleep=sleep)


def limited(hint: float | None = None) -> ModelRateLimited:
    return ModelRateLimited("rate limited", profile="p", retry_after=hint)


async def test_backoff_doubles_and_never_undercuts_the_hint() -> None:
    waits: list[float] = []
    inner = Failing([limited(), limited(5.0), ModelUnavailable("down", profile="p")])
    model = retrying(inner, waits, max_attempts=4, initial_backoff_seconds=1, max_backoff_seconds=8)
    assert (await model.complete(REQUEST, lambda _f: None)).text == "ok"
    assert waits == [1.0, 5.0, 4.0] and inner.calls == 4


async def test_it_gives_up_after_the_attempts_and_says_so() -> None:
    waits: list[float] = []
    model = retrying(Failing([limited()] * 9), waits, max_attempts=3, initial_backoff_seconds=0)
    with pytest.raises(ModelRateLimited) as caught:
        await model.complete(REQUEST, lambda _f: None)
    assert "gave up after 3 attempts" in caught.value.detail and len(waits) == 2


async def test_a_hint_beyond_the_cap_stops_at_once() -> None:
    waits: list[float] = []
    model = retrying(Failing([limited(600)]), waits, max_backoff_seconds=30)
    with pytest.raises(ModelRateLimited) as caught:
        await model.complete(REQUEST, lambda _f: None)
    assert waits == [] and "asks to wait 600 s" in caught.value.detail


async def test_no_retry_after_deltas_reached_subscribers_nor_for_final_failures() -> None:
    waits: list[float] = []
    streamed = Failing([ModelUnavailable("reset", profile="p")], stream_first=True)
    with pytest.raises(ModelUnavailable):
        await retrying(streamed, waits).complete(REQUEST, lambda _f: None)
    refused = Failing([ModelAuthFailed("no", profile="p")])
    with pytest.raises(ModelAuthFailed):
        await retrying(refused, waits).complete(REQUEST, lambda _f: None)
    assert waits == [] and streamed.calls == 1 and refused.calls == 1


@pytest.mark.parametrize(
    ("status", "text", "kind"),
    [
        (429, "", ModelRateLimited),
        (401, "", ModelAuthFailed),
        (400, "API key not valid. Please pass a valid API key.", ModelAuthFailed),
        (400, "context_length_exceeded maximum context length", ModelContextTooLong),
        (400, "prompt is too long: 210000 tokens > 200000 maximum", ModelContextTooLong),
        (
            400,
            "The input token count (9) exceeds the maximum number of tokens",
            ModelContextTooLong,
        ),
        (529, "overloaded", ModelUnavailable),
        (None, "", ModelUnavailable),
    ],
)
def test_failures_are_sorted_by_status_and_text(status: int | None, text: str, kind: type) -> None:
    error = classify(profile="p", status=status, text=text, credential_setting="the key file")
    assert type(error) is kind
    # The profile is named; the provider's own words are never repeated.
    assert "'p'" in error.detail
    assert not text or text[-12:] not in error.detail


def test_retry_after_values() -> None:
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds("250ms") == 0.25
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
