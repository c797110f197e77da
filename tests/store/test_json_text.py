"""`app.store.json_text.loads` gives exactly what `json.loads` gives (orjson where it is
exact, so an integer beyond 64 bits never comes back rounded), and `dumps` writes what
`json.dumps` writes (a NaN or an infinity too, which orjson would write as null)."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.store.json_text import dumps, loads

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()  # unbounded: far beyond 64 bits
    | st.integers(min_value=-(2**64), max_value=2**65)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types throughout (1 == 1.0 would hide a rounding)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


@given(_VALUES, st.booleans())
def test_loads_equals_the_standard_library(value: Any, compact: bool) -> None:
    text = json.dumps(value, separators=(",", ":") if compact else None, ensure_ascii=False)
    assert _same(loads(text), json.loads(text))


def test_big_integers_stay_exact() -> None:
    for number in (2**64 - 1, 2**64, -(2**63) - 1, 10**30, -(10**40)):
        assert loads(f'{{"n":{number}}}') == {"n": number}


def test_what_orjson_refuses_is_read_as_json_reads_it() -> None:
    assert loads("[1e400]") == [math.inf]
    assert math.isnan(loads("[NaN]")[0])
    assert loads('"\\ud800"') == "\ud800"
    assert loads('"\ud800"') == "\ud800"  # the lone surrogate itself, not its escape


def test_many_digits_without_a_long_run_and_a_long_run_in_a_string() -> None:
    text = json.dumps({"a": [123456789] * 5, "s": "1234567890123456789012", "n": 2**70})
    assert _same(loads(text), json.loads(text))
    assert _same(loads('{"a": [123456789, 987654321, 55]}'), {"a": [123456789, 987654321, 55]})


_WRITTEN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(_WRITTEN)
def test_dumps_writes_what_the_standard_library_writes(value: Any) -> None:
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    text = dumps(value)
    # The one difference allowed: how a float is spelled (orjson's shortest form).
    assert text == expected or _same(json.loads(text), json.loads(expected))
    assert ("NaN" in text or "Infinity" in text) == ("NaN" in expected or "Infinity" in expected)


def test_a_null_beside_a_nan_keeps_the_nan() -> None:
    assert dumps({"limit": None, "x": [1.5, math.nan]}) == '{"limit":null,"x":[1.5,NaN]}'
    assert dumps({"limit": None, "x": -math.inf}) == '{"limit":null,"x":-Infinity}'
    assert dumps({"limit": None, "x": 1.0}) == '{"limit":null,"x":1.0}'
