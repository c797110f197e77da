"""The reply-dropping proxy's reading of the backend protocol (pure: no server).

The lost-commit-reply test is only as good as this: a parser that never recognises a
finished commit drops nothing and the test passes vacuously (as asyncpg's `fetchrow`,
which ends with PortalSuspended rather than CommandComplete, once showed).
"""

from __future__ import annotations

import struct

from tests.faults.proxy import BackendParser


def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", 4 + len(body)) + body


READY_IDLE = message(b"Z", b"I")
READY_IN_TX = message(b"Z", b"T")
COMMIT = message(b"C", b"COMMIT\0")


def test_a_commit_then_idle_is_a_commit_reply() -> None:
    parser = BackendParser()
    assert parser.feed(COMMIT + READY_IDLE)
    assert parser.tag == "COMMIT"


def test_startup_and_statements_inside_a_transaction_are_not() -> None:
    parser = BackendParser()
    startup = message(b"R", b"\0\0\0\0") + message(b"S", b"a\0b\0") + READY_IDLE
    assert not parser.feed(startup)
    assert not parser.feed(message(b"C", b"INSERT 0 1\0") + READY_IN_TX)
    assert not parser.feed(message(b"E", b"SERROR\0\0") + READY_IDLE)


def test_an_autocommit_fetchrow_is_a_commit_reply() -> None:
    parser = BackendParser()
    reply = message(b"2") + message(b"D", b"\0\1\0\0\0\1x") + message(b"s") + READY_IDLE
    assert parser.feed(reply)


def test_messages_split_across_chunks() -> None:
    parser = BackendParser()
    stream = COMMIT + READY_IDLE
    assert not parser.feed(stream[:3])
    assert not parser.feed(stream[3 : len(COMMIT) + 2])
    assert parser.feed(stream[len(COMMIT) + 2 :])
    assert not parser.buffer


def test_the_answer_to_an_ssl_request_is_one_untyped_byte() -> None:
    parser = BackendParser()
    parser.untyped = 1
    assert parser.feed(b"N" + COMMIT + READY_IDLE)
    accepted = BackendParser()
    accepted.untyped = 1
    assert not accepted.feed(b"S" + COMMIT + READY_IDLE)  # encrypted: nothing more is read
    assert accepted.opaque
