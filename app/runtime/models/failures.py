"""Provider failures, sorted into what the run does about them.

Each provider client turns its SDK's exceptions into one of these, through `classify`, so
the retry policy and the loop decide on the kind of failure and never on an SDK class:

    ModelError                     (base.py: any failed model call)
    └── ProviderError              a provider answered with a failure, or could not be reached
        ├── ModelRateLimited       429: retried with backoff honouring the hint, then the stop
        ├── ModelUnavailable       5xx, overload, connection refused, timeout: retried too
        ├── ModelContextTooLong    the prompt is over the model's context: compact, retry once
        ├── ModelAuthFailed        401/403: stops the run; the message names the profile
        └── ModelRequestRefused    any other 4xx

Messages are written here, never copied from the provider: some providers echo a masked
part of a rejected key in theirs, and nothing of a credential may reach an event or a log.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from app.runtime.models.base import ModelError


class ProviderError(ModelError):
    """A provider call failed; `retryable` says whether trying again may help."""

    code = "provider_error"
    retryable = False

    def __init__(self, detail: str, *, profile: str, retry_after: float | None = None) -> None:
        super().__init__(detail, profile=profile)
        self.profile = profile
        self.retry_after = retry_after


class ModelRateLimited(ProviderError):
    code = "model_rate_limited"
    retryable = True


class ModelUnavailable(ProviderError):
    code = "model_unavailable"
    retryable = True


class ModelContextTooLong(ProviderError):
    code = "model_context_too_long"


class ModelAuthFailed(ProviderError):
    code = "model_auth_failed"


class ModelRequestRefused(ProviderError):
    code = "model_request_refused"


# What providers say when a prompt is over the context window (OpenAI's error code,
# Anthropic's "prompt is too long", Gemini's "input token count ... exceeds", vLLM's and
# Ollama's "maximum context length"). Matched on the provider's text, which is read only
# to decide, never repeated.
_CONTEXT = re.compile(
    r"context_length_exceeded|context length|context window|prompt is too long|"
    r"input token count.*exceeds|too many tokens|maximum context",
    re.IGNORECASE | re.DOTALL,
)


def is_context_refusal(text: str) -> bool:
    return bool(_CONTEXT.search(text))


def classify(
    *,
    profile: str,
    status: int | None,
    text: str = "",
    retry_after: float | None = None,
    credential_setting: str | None = None,
) -> ProviderError:
    """The ProviderError for an HTTP status (None: no answer) and the provider's error text."""
    where = f"profile {profile!r}"
    if status is None:
        return ModelUnavailable(
            f"{where}: the model endpoint could not be reached", profile=profile
        )
    if status in (401, 403) or (status == 400 and "api key" in text.lower()):
        fix = f"; check {credential_setting}" if credential_setting else ""
        return ModelAuthFailed(
            f"{where}: the provider refused the credential (HTTP {status}){fix}", profile=profile
        )
    if status == 429:
        return ModelRateLimited(
            f"{where}: rate limited by the provider (HTTP 429)",
            profile=profile,
            retry_after=retry_after,
        )
    if status in (400, 413, 422) and is_context_refusal(text):
        return ModelContextTooLong(
            f"{where}: the prompt is longer than the model's context window (HTTP {status})",
            profile=profile,
        )
    if status >= 500 or status in (408, 409, 529):
        return ModelUnavailable(
            f"{where}: the provider is unavailable (HTTP {status})",
            profile=profile,
            retry_after=retry_after,
        )
    return ModelRequestRefused(
        f"{where}: the provider refused the request (HTTP {status})", profile=profile
    )


def retry_after_seconds(value: str | None) -> float | None:
    """A `Retry-After` (or `retry-after-ms` as "123ms") header value in seconds, or None."""
    if not value:
        return None
    value = value.strip()
    try:
        if value.endswith("ms"):
            return max(0.0, float(value[:-2]) / 1000)
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def retry_hint(headers: object) -> float | None:
    """The provider's retry hint from response headers (`retry-after-ms` wins)."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    millis = get("retry-after-ms")
    if millis:
        return retry_after_seconds(f"{millis}ms")
    return retry_after_seconds(get("retry-after"))
