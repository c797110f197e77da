"""The JSON shape checks (issue #17): the raw-bytes scan agrees with a parse, never recurses,
and the redaction walk handles any depth without RecursionError."""

from __future__ import annotations

import json
import math
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.runtime.errors import InvalidRequest, JsonTooDeep, NonFiniteNumber
from app.runtime.session.json_limits import MAX_JSON_DEPTH, check_json_value, scan_json_bytes
from app.runtime.session.redaction import MARKER, Redactor
from app.runtime.session.transfer import EXPORT_FORMAT, parse_export


def depth_of(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ax,:'),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet='[]{}"\\a', max_size=4), children, max_size=3)
    ),
    max_leaves=30,
)


@given(json_values, st.integers(min_value=0, max_value=8))
def test_the_byte_scan_and_the_value_walk_agree_with_the_depth(value: object, limit: int) -> None:
    raw = json.dumps(value).encode()
    deep = depth_of(value) > limit
    checks = (
        lambda: scan_json_bytes(raw, max_depth=limit),
        lambda: check_json_value(value, max_depth=limit),
    )
    for check in checks:
        if deep:
            with pytest.raises(JsonTooDeep):
                check()
        else:
            check()


def test_far_deeper_than_the_recursion_limit_is_refused_without_recursion() -> None:
    depth = sys.getrecursionlimit() * 50
    with pytest.raises(JsonTooDeep) as raised:
        scan_json_bytes(b"[" * depth + b"]" * depth)
    assert raised.value.extra == {"max_depth": MAX_JSON_DEPTH}
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    with pytest.raises(JsonTooDeep):
        check_json_value(value)


def test_many_shallow_containers_pass() -> None:
    scan_json_bytes(b"[" + b"[],{}," * 100_000 + b"1]")


def test_redaction_walks_any_depth_and_keeps_order() -> None:
    value: object = {"k": "sk-test-CANARY0123456789abcdef"}
    for _ in range(sys.getrecursionlimit() * 5):
        value = [value]
    out = Redactor().value(value)
    for _ in range(sys.getrecursionlimit() * 5):
        assert isinstance(out, list) and len(out) == 1
        out = out[0]
    assert out == {"k": MARKER}
    ordered = Redactor().value({"z": 1, "a": [{"y": 2, "b": 3}], "m": "x"})
    assert list(ordered) == ["z", "a", "m"] and list(ordered["a"][0]) == ["y", "b"]


def test_an_imported_ledger_line_too_deep_is_refused_with_its_line_number() -> None:
    header = json.dumps({"format": EXPORT_FORMAT, "last_seq": 1})
    line = '{"seq": 1, "type": "X", "payload": {"a": ' + "[" * 5000 + "]" * 5000 + "}}"
    with pytest.raises(InvalidRequest, match="line 2: JSON may be nested at most 64"):
        parse_export([header, line])


@pytest.mark.parametrize("token", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_literals_are_refused_outside_strings_only(token: bytes) -> None:
    with pytest.raises(NonFiniteNumber):
        scan_json_bytes(b'{"a": [1, ' + token + b"]}")
    scan_json_bytes(b'{"' + token + b'": "x\\"' + token + b'"}')


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf, float("1e999")])
def test_non_finite_floats_are_refused_in_parsed_values(number: float) -> None:
    with pytest.raises(NonFiniteNumber):
        check_json_value({"a": [{"b": number}]})
    check_json_value({"a": [1e308, -1e308, 10**400]})
