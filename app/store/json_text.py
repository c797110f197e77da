"""JSON text written to and read back from the database: orjson where it is exact, the
standard library where it would not be.

Every stored row a write returns (a session row, a run row) and every event read carries
JSON columns, decoded on each call; orjson does that several times faster than `json`. It
is not exact everywhere: an integer beyond 64 bits comes back as a float, rounded. JSON
numbers may be arbitrarily large and a payload must read back as it was written, so a text
holding a run of 19 digits or more (which may be such an integer) is decoded by `json`, as
is any text orjson refuses (a lone surrogate, a number that overflows to infinity), so the
result, or the error, is always the standard library's.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

# 19 digits in a row: possibly an integer outside orjson's exact range (-2**63 .. 2**64-1).
# JSON numbers are ASCII digits, so the check runs on the UTF-8 bytes.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
_DIGITS = b"0123456789"


def loads(text: str) -> Any:
    """`json.loads(text)`, computed by orjson when that gives the same value.

    The regex alone cost several times orjson's whole decode (9 of 10 microseconds for a
    600-byte message), so it runs only on a text holding 19 digits or more in all; counting
    them (`bytes.translate` deleting digits) is about as cheap as the decode.
    """
    try:
        raw = text.encode()
    except UnicodeEncodeError:  # a lone surrogate: orjson refuses it, json reads it
        return json.loads(text)
    digits = len(raw) - len(raw.translate(None, _DIGITS))
    if digits >= 19 and _LONG_DIGITS.search(raw) is not None:
        return json.loads(text)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(text)


# orjson refuses (TypeError) what it would write differently from `json` (a datetime, a
# dataclass, a subclass of a JSON type, an integer beyond 64 bits, a key that is not a
# string), and the standard library then writes it, or raises, as it always did.
_ORJSON_EXACT = (
    orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)  # fmt: skip
_INFINITIES = (math.inf, -math.inf)


def dumps(value: Any) -> str:
    """Compact JSON text, as `json.dumps(value, separators=(",", ":"), ensure_ascii=False)`
    writes it (up to how a float's exponent is spelled), by orjson: ten times faster.

    orjson writes NaN and the infinities as `null`, where `json` writes tokens that are not
    JSON (and that PostgreSQL refuses), so a value holding one is written again by `json`:
    the value, or the error, stays the standard library's. Most payloads hold a `null` of
    their own (an unset limit, a run id), so it is the value that is searched for such a
    float, not the text for `null`: a walk costs far less than writing it again.
    """
    try:
        raw = orjson.dumps(value, option=_ORJSON_EXACT)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if b"null" in raw and _holds_non_finite(value):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return raw.decode()


def _holds_non_finite(value: Any) -> bool:
    """Whether a value orjson wrote (so made of exact JSON types) holds a NaN or an
    infinity."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is float and (item != item or item in _INFINITIES):
            return True
    return False
