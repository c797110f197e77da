"""Standard Webhooks signatures (https://www.standardwebhooks.com), so that receivers can
verify deliveries with any of its libraries.

A secret is `whsec_` + base64 of 32 random bytes; the key is those bytes. A delivery carries
`webhook-id` (the message id, the same on every retry, for deduplication),
`webhook-timestamp` (Unix seconds of this attempt) and `webhook-signature`:
`v1,` + base64 of HMAC-SHA256(key, "{id}.{timestamp}.{body}").
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A fresh signing secret, shown to the tenant once."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(secret: str, *, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value for one attempt."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(secret: str, *, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers, plus the content type."""
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, msg_id=msg_id, timestamp=timestamp, body=body),
    }
