"""Short-lived stream tokens for browsers.

`EventSource` cannot send an Authorization header, and an API key must never appear in a
URL (access logs, browser history, Referer). A client with a key asks for a token instead:
scoped to its tenant and optionally to one session, valid for minutes, and signed with
HMAC-SHA-256 under a server secret, so any replica that shares the secret can check it
without a database round trip. Format: `ast1.<base64url JSON claims>.<base64url MAC>`.

A token names the API key that asked for it (its public prefix, claim `k`): the signature
proves the token is ours and unexpired, but only the key says whether its holder may still
read. Opening a stream with a token checks that key in the database (revoked, or gone with
its tenant: refused at once), and open streams re-check it (`app.runtime.access.revocation`).
A token without `k` (from an older release) is refused; clients ask for a new one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass

from app.runtime.errors import Unauthorized

_PREFIX = "ast1"


@dataclass(frozen=True, slots=True)
class StreamGrant:
    """What a stream request may read: one tenant, and one session or all of them; and the
    API key the right comes from (its prefix), which must still be live."""

    tenant_id: str
    session_id: str | None = None
    key_prefix: str | None = None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StreamTokens:
    """Issues and checks stream tokens under one secret."""

    def __init__(self, secret: bytes, *, ttl_seconds: int) -> None:
        if len(secret) < 32:
            raise ValueError("the stream token secret must be at least 32 bytes")
        self._secret = secret
        self.ttl_seconds = ttl_seconds

    def issue(
        self, grant: StreamGrant, *, ttl_seconds: int | None = None, now: float | None = None
    ) -> tuple[str, int]:
        """A token for `grant`; returns (token, expiry as Unix seconds)."""
        ttl = min(ttl_seconds or self.ttl_seconds, self.ttl_seconds)
        expires = int((now if now is not None else time.time()) + ttl)
        claims: dict[str, str | int | None]
        claims = {"t": grant.tenant_id, "s": grant.session_id, "k": grant.key_prefix}
        claims["exp"] = expires
        body = f"{_PREFIX}.{_b64(json.dumps(claims, separators=(',', ':')).encode())}"
        return f"{body}.{self._mac(body)}", expires

    def verify(self, token: str, *, now: float | None = None) -> StreamGrant:
        """The grant in a valid, unexpired token.

        Raises:
            Unauthorized: malformed, forged or expired (one message for all three).
        """
        body, _, mac = token.rpartition(".")
        if not body.startswith(_PREFIX + ".") or not hmac.compare_digest(mac, self._mac(body)):
            raise Unauthorized()
        try:
            claims = json.loads(_unb64(body.split(".", 1)[1]))
            tenant_id, session_id, expires = claims["t"], claims["s"], int(claims["exp"])
            key_prefix = claims["k"]
        except (ValueError, KeyError, TypeError):
            raise Unauthorized() from None
        if expires <= (now if now is not None else time.time()):
            raise Unauthorized()
        if not isinstance(tenant_id, str) or not isinstance(key_prefix, str):
            raise Unauthorized()
        return StreamGrant(tenant_id=tenant_id, session_id=session_id, key_prefix=key_prefix)

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._secret, body.encode(), hashlib.sha256).digest())
