"""schemathesis hooks for tests/e2e/test_schema_fuzz.py (loaded through SCHEMATHESIS_HOOKS).

The fuzzer draws an `Idempotency-Key` as any other string, so two different requests often
carry the same one ("" or "0"), and the service rightly answers 422 `idempotency_key_reused`
to the second. A client makes a new key for each new request; so does the fuzzer here: a
generated key that is valid (255 characters at most) becomes a fresh one, and an invalid one
is left as it is for the negative tests.
"""

from __future__ import annotations

import uuid
from typing import Any

import schemathesis

MAX_KEY_LENGTH = 255


@schemathesis.hook
def map_headers(ctx: Any, headers: dict[str, Any] | None) -> dict[str, Any] | None:
    if headers is None:
        return headers
    key = headers.get("Idempotency-Key")
    if isinstance(key, str) and len(key) <= MAX_KEY_LENGTH:
        headers["Idempotency-Key"] = f"fuzz-{uuid.uuid4().hex}"
    return headers


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    """The same for requests no strategy draws (the coverage and examples phases, which
    `map_headers` never sees), for valid requests only: schemathesis revalidates a case a
    hook changed, and a changed negative case (say, one missing its Authorization header on
    purpose) would be sent as a positive one."""
    headers = case.headers
    if not headers or case.meta is None or case.meta.generation.mode.is_negative:
        return
    key = headers.get("Idempotency-Key")
    if isinstance(key, str) and len(key) <= MAX_KEY_LENGTH:
        headers["Idempotency-Key"] = f"fuzz-{uuid.uuid4().hex}"
