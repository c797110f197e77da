"""A snapshot's state as stored text, and back: the text written, and the state read only
when it matches the hash written beside it (a torn or tampered row never resumes).

A snapshot's hash (`state_hash`) is the SHA-256 of the state's canonical text: sorted keys,
compact, UTF-8. Both backends store text (TEXT on PostgreSQL, since migration 0022), so
they store the canonical text itself (`snapshot_text`). Then a load hashes the bytes it read
and decodes them once (`intact_canonical_state`), instead of decoding, encoding again and
hashing; and on a large state the decode runs on a second thread while this one hashes
(hashlib lets go of the GIL on large inputs). Text that is not canonical (PostgreSQL's
rows from its JSONB days, a state orjson would not read back exactly) is decoded and
checked the long way (`intact_state`).
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from app.runtime.session.state import quick_state_intact, state_intact
from app.store.json_text import loads

# Below this a hash is quicker than a trip to another thread.
_OVERLAP_BYTES = 256 * 1024
_decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot-decode")


def intact_state(text: str, stored_hash: str) -> dict[str, Any] | None:
    """A snapshot's state decoded from its JSON text, or None when it does not match its
    hash (torn or tampered).

    orjson alone first, with the hash checked on orjson's own text: an integer it would
    round (beyond 64 bits) then fails the check, so a state that passes is exact. Only
    otherwise is the text decoded exactly (`json_text.loads`) and checked again.
    """
    try:
        quick = orjson.loads(text)
    except orjson.JSONDecodeError:
        quick = None
    if isinstance(quick, dict) and quick_state_intact(quick, stored_hash):
        return quick
    try:
        exact = loads(text)
    except ValueError:  # not JSON at all: torn as well
        return None
    return exact if isinstance(exact, dict) and state_intact(exact, stored_hash) else None


def snapshot_text(state: dict[str, Any]) -> tuple[str, str]:
    """The text stored for `state`, and `state`'s hash.

    The text is the canonical text that was hashed when orjson reads it back as exactly
    `state`: orjson's own sorted text is the same bytes (no integer beyond 64 bits, which
    orjson refuses to write and would round when reading; no NaN, which it writes as null;
    every float spelled as `repr` spells it, so orjson reads back the same float). Otherwise
    the standard library's default text (", " and ": " between items), which differs from
    the canonical text of any state with a key, so a load never takes it for canonical and
    checks it the long way. `intact_canonical_state` relies on exactly this.
    """
    canonical = json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    blob = canonical.encode()
    digest = hashlib.sha256(blob).hexdigest()
    try:
        exact = orjson.dumps(state, option=orjson.OPT_SORT_KEYS) == blob
    except TypeError:
        exact = False
    return (canonical if exact else json.dumps(state)), digest


def intact_canonical_state(raw: bytes, stored_hash: str) -> dict[str, Any] | None:
    """`intact_state` for text written by `snapshot_text`: when the bytes read are the
    hashed text, they are that canonical text, which orjson reads exactly, so they are
    decoded once and not encoded again. Any other text (a row written before the backend
    stored canonical text, or one whose state orjson would not read back exactly) is
    checked the long way."""
    if len(raw) >= _OVERLAP_BYTES:
        # The decode goes to the other thread and this one hashes: hashlib lets go of the
        # GIL while it hashes, so the decode runs meanwhile. (The other way round, the
        # hashing thread could not even start: orjson holds the GIL until it is done.)
        decoding = _decoder.submit(_decode, raw)
        digest = _sha256(raw)
        state = decoding.result()
    else:
        digest, state = _sha256(raw), _decode(raw)
    if digest == stored_hash and isinstance(state, dict):
        return state
    return intact_state(raw.decode(errors="replace"), stored_hash)  # torn UTF-8 fails


def intact_stored_state(text: str | bytes, stored_hash: str) -> dict[str, Any] | None:
    """A snapshot's state from its column as read (bytes, or a str the driver decoded), or
    None when it does not match its hash."""
    return intact_canonical_state(text if isinstance(text, bytes) else text.encode(), stored_hash)


def _sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _decode(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
