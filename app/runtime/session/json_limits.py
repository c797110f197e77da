"""The shape every JSON value the service accepts must have: at most `MAX_JSON_DEPTH` levels of
nesting, and only finite numbers.

Why a depth limit: every layer that handles a stored value walks it, and several walk it
recursively -- Python's `json` parser, pydantic's serializer (which gives up at a few hundred
levels, so a value stored deeper makes every later read of it a 500), the metadata merge
patch. A value refused at the door can never poison a read.

Why finite numbers only: Python's `json` reads `NaN`, `Infinity` and `-Infinity` (and turns
an overflowing literal such as `1e999` into infinity), but they are not JSON (RFC 8259): the
response encoder and PostgreSQL's JSONB both refuse them, so accepted they fail later as a 500.

Two checks, both without recursion, so a client cannot drive them deep:
- `scan_json_bytes` reads raw request bytes before anything parses them;
- `check_json_value` walks an already-parsed value (a backstop for values that did not come
  through a request body, and for overflowing literals, which only parsing reveals).
"""

from __future__ import annotations

import math
import re
from itertools import accumulate
from typing import Any

from app.runtime.errors import JsonTooDeep, NonFiniteNumber

MAX_JSON_DEPTH = 64

# A JSON string (escapes included). Unrolled so that the engine never backtracks; an
# unterminated string does not match and is left for the parser to refuse.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Outside strings, JSON has no letters but those of true, false and null (and an exponent's
# e): these tokens can only be Python's extensions.
_NON_FINITE = re.compile(rb"NaN|Infinity")
_OPENERS = (ord("["), ord("{"))
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
_STEP = [0] * 256
for _byte in _OPENERS:
    _STEP[_byte] = 1
for _byte in b"]}":
    _STEP[_byte] = -1


def scan_json_bytes(raw: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse a JSON text nested deeper than `max_depth` or holding NaN / Infinity.

    Linear in the size of `raw`, with no recursion and no parsing: strings are blanked out,
    then the running balance of brackets is computed in C (`accumulate`). A body that is not
    JSON at all passes unless it happens to look deep; the parser refuses it afterwards.

    Raises:
        JsonTooDeep: nesting deeper than `max_depth`.
        NonFiniteNumber: a NaN, Infinity or -Infinity literal outside strings.
    """
    may_be_deep = raw.count(b"[") + raw.count(b"{") > max_depth
    may_be_non_finite = b"NaN" in raw or b"Infinity" in raw
    if not (may_be_deep or may_be_non_finite):
        return  # the common case: nothing to blank out
    structure = _STRING.sub(b'""', raw)
    if may_be_non_finite and _NON_FINITE.search(structure):
        raise NonFiniteNumber()
    if may_be_deep:
        brackets = structure.translate(None, _NOT_BRACKETS)
        if brackets and max(accumulate(map(_STEP.__getitem__, brackets))) > max_depth:
            raise JsonTooDeep(max_depth)


def check_json_value(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse a parsed JSON value nested deeper than `max_depth` or holding a non-finite float.

    Depth counts containers: `{}` and `[]` are depth 1, `{"a": [1]}` is depth 2, a scalar 0.

    Raises:
        JsonTooDeep: nesting deeper than `max_depth`.
        NonFiniteNumber: a float that is NaN or infinite.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            if isinstance(item, float) and not math.isfinite(item):
                raise NonFiniteNumber()
            continue
        if depth + 1 > max_depth:
            raise JsonTooDeep(max_depth)
        stack.extend((child, depth + 1) for child in children)
