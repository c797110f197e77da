"""Our Standard Webhooks signatures verify with the `standardwebhooks` library (issue #20),
an implementation independent of ours, and fail for a changed body, id or secret."""

from __future__ import annotations

import time

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from app.runtime.webhooks.signing import new_secret, signed_headers


def test_a_signature_verifies_with_the_reference_library() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_") and len(secret) > 40
    body = b'{"type":"RUN_FINISHED","data":{"seq":3}}'
    headers = signed_headers(secret, msg_id="evt-1", timestamp=int(time.time()), body=body)
    assert Webhook(secret).verify(body, headers) == {"type": "RUN_FINISHED", "data": {"seq": 3}}
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body + b" ", headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, {**headers, "webhook-id": "evt-2"})
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)


def test_two_secrets_are_never_the_same() -> None:
    assert len({new_secret() for _ in range(100)}) == 100
