"""JSON text read back from the database: orjson where it is exact, the standard library
where it would not be.

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
