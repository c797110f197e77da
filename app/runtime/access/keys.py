"""API keys: `asr_<prefix>_<secret>`, shown once, stored as prefix + SHA-256(secret).

The prefix is public (it finds the row and appears in listings); the secret has 256 bits of
randomness, so a plain SHA-256 is enough (no slow hash needed), and it is compared with
`hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

KEY_SCHEME = "asr"


@dataclass(frozen=True, slots=True)
class NewKey:
    raw: str
    prefix: str
    secret_hash: str


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def generate_key() -> NewKey:
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    return NewKey(
        raw=f"{KEY_SCHEME}_{prefix}_{secret}", prefix=prefix, secret_hash=hash_secret(secret)
    )


def parse_key(raw: str) -> tuple[str, str] | None:
    """(prefix, secret) of a well-formed key, else None."""
    parts = raw.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_SCHEME or len(parts[1]) != 12 or not parts[2]:
        return None
    return parts[1], parts[2]


def secret_matches(secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), stored_hash)
