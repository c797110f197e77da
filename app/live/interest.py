"""Which sessions other replicas listen to, so that no replica sends NOTIFYs nobody hears.

Every commit's wake-up and every tick of every streaming run went to every replica as a
NOTIFY: a transaction on the database and a notification each replica's listener parsed,
whether or not it had a subscriber there. Most have none: a run's stream, its waiter and
its deltas are usually on the replica that runs it. So each replica says what it listens
to, and the others send a session's wake-ups and deltas only while some replica does.

**The message** (`INTEREST_CHANNEL`): `[1, origin, fresh, [[tenant, session], ...]]`, the
sessions one replica has live subscribers of (`session` "" = every session of the tenant,
for a tenant's stream; tenant "" = everything, for a replica whose read-replica fence
needs every head). A replica sends its new sessions as they get their first subscriber
(`fresh`: 1), and all of them every `renew_seconds` (`fresh`: 0); the others keep each for
`TTL_RENEWALS` renewals. A replica whose listener has just connected sends all of its own
with `fresh`: 2, which also asks every other replica to send all of theirs at once.

**Nothing is lost for it.** A replica that hears a fresh session sends at once what it
kept back of it: the wake-up of its last commit (`Notifier.resend`) and, if it runs a turn
there, the turn's text so far at offset 0 (`DeltaRelay.catch_up_remote`), then the rest as
it comes. So a write that landed between a subscriber's replay read and the moment the
writer heard of it is announced all the same, and a replica's text never has a hole. A
turn whose deltas went out sends its END whoever listens now, so no replica keeps the
text of a turn that has ended.

**When a replica cannot know**, it sends everything: while its listener is down, and after
it (re)connects (interest messages may have been lost) until the others have answered its
ask (`OPEN_SECONDS`, far longer than a NOTIFY's round trip; an answer that comes later
still gets what was kept back, as a session new to it counts as fresh). A reconnecting
replica re-announces all its sessions as fresh: what it missed while it was deaf is sent
again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from app.store.announce import PACK_BYTES, ascii_json

INTEREST_CHANNEL = "asr_interest"
ALL = ""  # a session of "" is every session of the tenant; a tenant of "" every tenant
TTL_RENEWALS = 3
# After the listener (re)connects: everything is sent this long, while the others answer.
OPEN_SECONDS = 2.0
RENEWAL, FRESH, ASK = 0, 1, 2  # a message's `fresh`
_VERSION = 1

Key = tuple[str, str]  # (tenant_id, session_id)


def encode_interest(origin: str, keys: Iterable[Key], *, fresh: int) -> list[str]:
    """The payloads that announce `keys` (at least one: an ASK with none still asks),
    each under PostgreSQL's limit for a NOTIFY."""
    head = ascii_json([_VERSION, origin, fresh])[:-1] + ",["
    payloads: list[str] = []
    parts: list[str] = []
    size = len(head) + 2
    for key in keys:
        part = ascii_json(list(key))
        if len(head) + len(part) + 3 > PACK_BYTES:
            continue  # ids too long for any NOTIFY: their sessions are polled
        if parts and size + len(part) + 1 > PACK_BYTES:
            payloads.append(head + ",".join(parts) + "]]")
            parts, size = [], len(head) + 2
        parts.append(part)
        size += len(part) + 1
    if parts or (fresh == ASK and not payloads):
        payloads.append(head + ",".join(parts) + "]]")
    return payloads


def decode_interest(payload: str) -> list[tuple[str, int, list[Key]]]:
    """(origin, fresh, keys) of each message in a payload (one, or a pack of them)."""
    try:
        doc = json.loads(payload)
    except ValueError:
        return []
    messages = doc if isinstance(doc, list) and doc and isinstance(doc[0], list) else [doc]
    found = []
    for message in messages:
        try:
            version, origin, fresh, keys = message
        except (TypeError, ValueError):
            continue
        if version != _VERSION or not isinstance(origin, str) or not isinstance(keys, list):
            continue
        if fresh not in (RENEWAL, FRESH, ASK):
            continue
        valid = [
            (k[0], k[1])
            for k in keys
            if isinstance(k, list) and len(k) == 2 and all(isinstance(x, str) for x in k)
        ]
        found.append((origin, fresh, valid))
    return found


class RemoteInterest:
    """What the other replicas listen to, as this replica has heard it."""

    def __init__(self, origin: str, *, renew_seconds: float) -> None:
        self.origin = origin
        self.renew_seconds = renew_seconds
        self._ttl = renew_seconds * TTL_RENEWALS
        self._until: dict[Key, float] = {}
        self._open_until = float("inf")  # until the listener is first connected
        self.counters = {"interest_heard": 0}

    def deaf(self) -> None:
        """The listener is down: this replica hears no announcement, so it wants everything
        until it listens again (as before any interest was known)."""
        self._open_until = float("inf")

    def open(self) -> None:
        """Messages may have been missed (the listener (re)connected): want everything
        while the other replicas answer this one's ASK."""
        self._open_until = time.monotonic() + OPEN_SECONDS

    def wants(self, tenant_id: str, session_id: str) -> bool:
        """Whether some other replica listens to the session (or may: see `open`)."""
        now = time.monotonic()
        if now < self._open_until:
            return True
        until = self._until
        for key in ((tenant_id, session_id), (tenant_id, ALL), (ALL, ALL)):
            if until.get(key, 0.0) > now:
                return True
        return False

    def heard(self, payload: str) -> tuple[list[Key], bool]:
        """Apply an interest payload. Returns the keys another replica announced fresh, or
        that were not wanted until now (what was kept back of them is owed), and whether
        it asked for this replica's own. This replica's own messages are ignored."""
        fresh_keys: list[Key] = []
        asked = False
        now = time.monotonic()
        until = now + self._ttl
        for origin, fresh, keys in decode_interest(payload):
            if origin == self.origin:
                continue
            self.counters["interest_heard"] += 1
            asked = asked or fresh == ASK
            for key in keys:
                # New to this replica (a fresh message it missed) counts as fresh too.
                if fresh != RENEWAL or self._until.get(key, 0.0) <= now:
                    fresh_keys.append(key)
                self._until[key] = until
        return fresh_keys, asked

    def sweep(self) -> None:
        """Forget what expired."""
        now = time.monotonic()
        for key in [k for k, t in self._until.items() if t <= now]:
            del self._until[key]

    def stats(self) -> dict[str, int]:
        return {**self.counters, "interest_remote": len(self._until)}
