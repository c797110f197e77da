"""The redaction pre-check (`Redactor._may_match`) must never change the output: the fast
`Redactor` is compared with the straightforward implementation below (NUL replacement, then
every pattern's substitution in order), on random strings made of real-looking secrets and
plain text, on nested JSON values, and with extra patterns that carry inline flags."""

from __future__ import annotations

import json
import re
import sys
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.runtime.session import redaction
from app.runtime.session.redaction import DEFAULT_PATTERNS, MARKER, Redactor
from app.store.payloads import Payloads, new_event_ids


def reference_text(patterns: list[re.Pattern[str]], value: str) -> str:
    """Redactor.text as it was before the pre-check."""
    value = value.replace("\x00", "\ufffd")
    for pattern in patterns:
        if pattern.groups:
            value = pattern.sub(lambda m: m.group(1) + MARKER, value)
        else:
            value = pattern.sub(MARKER, value)
    return value


def reference_value(patterns: list[re.Pattern[str]], value: Any) -> Any:
    if isinstance(value, str):
        return reference_text(patterns, value)
    if isinstance(value, dict):
        return {reference_text(patterns, k): reference_value(patterns, v) for k, v in value.items()}
    if isinstance(value, list):
        return [reference_value(patterns, v) for v in value]
    return value


def compiled(extra: Iterable[str] = ()) -> list[re.Pattern[str]]:
    return [re.compile(p) for p in (*DEFAULT_PATTERNS, *extra)]


FRAGMENTS = [
    # Secrets, whole and cut short, and the words around them.
    "sk-test-CANARY0123456789abcdef",
    "sk-ant-abcdefghijklmnop",
    "sk-short",
    "task-list",
    "ghp_CANARY0123456789abcdefghij",
    "gho_",
    "github_pat_11ABCDEFG0123456789_abcdefgh",
    "AKIACANARY0123456789",
    "akiacanary0123456789",
    "AKIA",
    "xoxb-1234567890-abcdef",
    "AIzaSyA1234567890abcdefghijklmnopqrstu",
    "asr_0123456789ab_ABCDEFGHIJKLMNOPqrst",
    "asr_0123456789ab_",
    "Bearer CANARYbearerTOKEN0123",
    "BEARER\tabc.def.ghi==",
    "bEaReR ",
    "Authorization: Bearer ",
    "api_key=CANARYvalue42",
    "API-KEY: 'abcdefgh'",
    "apikey",
    '"password": "hunter2hunter2"',
    "passwd=",
    "secret : xyz123",
    "access_token=abc",
    "auth-token:",
    "input_tokens",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAK\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----",
    "-----END PRIVATE KEY-----",
    # Characters that match ASCII letters only case-insensitively, in the keywords.
    "\u017fecret=abcd1234",  # long s
    "pa\u017f\u017fword: longvalue",
    "ap\u0131_key=abcd1234",  # dotless i
    "AP\u0130_KEY=abcd1234",  # dotted capital I
    "access_to\u212aen=abcd1234",  # Kelvin sign
    "bearer\u00a0abcdefghij",  # no-break space is \s
    "caf\u00e9 \U0001f600 na\u00efve",
    # Plain text and separators.
    "\x00",
    "The quick brown fox jumps over the lazy dog. ",
    " ",
    "\n",
    "=",
    ":",
    "_",
    "-",
    '"',
    "'",
    ",",
    "0123456789abcdef",
    "ABCDEFGHIJKLMNOP",
]

fragment_strings = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=12
).map("".join)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | fragment_strings,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(fragment_strings, children, max_size=4)
    ),
    max_leaves=12,
)

EXTRA = [
    r"(?i)internal-[a-z]{6,}",
    r"(?i)(?s)begin.*?end",
    r"(?x) CANARY \d+  # a trailing verbose comment",
    r"(?a)\w+_id=(\d+)",
    r"(?m)^token$",
]

FAST = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(fragment_strings)
def test_text_matches_the_reference(value: str) -> None:
    assert Redactor().text(value) == reference_text(compiled(), value)


@FAST
@given(json_values)
def test_value_matches_the_reference(value: Any) -> None:
    assert Redactor().value(value) == reference_value(compiled(), value)


@FAST
@given(fragment_strings | st.sampled_from(["Internal-ABCDEFG", "BEGIN x END", "CANARY 42"]))
def test_extra_patterns_with_inline_flags_match_the_reference(value: str) -> None:
    redactor = Redactor(EXTRA)
    assert len(redactor._extra_checks) == 1  # their alternation could be built
    assert redactor.text(value) == reference_text(compiled(EXTRA), value)


@pytest.mark.parametrize("pattern", DEFAULT_PATTERNS)
def test_every_default_match_passes_the_pre_check(pattern: str) -> None:
    """The hand-written hint of the default patterns must be true wherever one matches."""
    redactor = Redactor()

    @settings(max_examples=300, deadline=None)
    @given(st.from_regex(pattern))
    def check(value: str) -> None:
        assert redactor._may_match(value)

    check()


def test_fold_maps_every_case_insensitive_ascii_letter_match_to_that_letter() -> None:
    any_letter = re.compile(r"(?i)[a-z]")
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if any_letter.fullmatch(char) is None:
            continue
        matched = [c for c in "abcdefghijklmnopqrstuvwxyz" if re.fullmatch(f"(?i){c}", char)]
        assert len(matched) == 1
        assert redaction._fold(char) == matched[0], hex(code)
        # The same through the non-ASCII path.
        assert redaction._fold(f"{char}\u00e9") == f"{matched[0]}\u00e9", hex(code)


@pytest.mark.parametrize(
    "extra",
    [
        [r"(a+)\1"],  # a numbered backreference would shift in an alternation
        [r"(?P<n>x)y", r"(?P<n>z)w"],  # repeated group name: the alternation does not compile
        [r"(?x) (?i)foo"],  # global flags after verbose whitespace: cannot be scoped
    ],
)
def test_extra_patterns_that_cannot_be_combined_are_checked_one_by_one(extra: list[str]) -> None:
    redactor = Redactor(extra)
    assert len(redactor._extra_checks) == len(extra)
    for value in ("aa aa", "xy zw", "FOO", "foo", "plain", "xy api_key=abcdefg"):
        assert redactor.text(value) == reference_text(compiled(extra), value)


def test_invalid_extra_patterns_still_fail_at_construction() -> None:
    with pytest.raises(re.error):
        Redactor([r"x(?i)y"])
    with pytest.raises(re.error):
        Redactor([r"(unclosed"])


json_documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | fragment_strings,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(fragment_strings, children, max_size=4)
    ),
    max_leaves=12,
)


@FAST
@given(json_values)
def test_the_json_pre_check_says_yes_wherever_redaction_changes_something(value: Any) -> None:
    """`json_may_change` may only say no for a document that redaction leaves as it is."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if reference_value(compiled(), value) != value:
        assert Redactor().json_may_change(text)


@FAST
@given(json_documents)
def test_the_payload_funnel_stores_what_it_always_stored(value: Any) -> None:
    """`Payloads.persistable_json` skips the walk and encodes with orjson where it can: its
    value and its text are still the redacted value and `json.dumps` of it (up to how a
    float is spelled: the same number either way)."""
    payload = {"v": value}
    clean, text = Payloads().persistable_json(payload)
    expected = reference_value(compiled(), payload)
    assert _same(clean, expected)
    reference = _reference_dumps(expected)
    assert _same(json.loads(text), json.loads(reference))
    if not any(e in spelled for spelled in (text, reference) for e in "eE"):
        assert text == reference  # no exponent in either spelling: the very same text


@FAST
@given(json_values)
def test_with_extra_patterns_the_funnel_always_walks(value: Any) -> None:
    payload = {"v": value}
    clean, _ = Payloads(redactor=Redactor(EXTRA)).persistable_json(payload)
    assert clean == reference_value(compiled(EXTRA), payload)


def test_the_funnel_refuses_what_json_refuses_and_keeps_what_orjson_would_change() -> None:
    funnel = Payloads()
    assert json.loads(funnel.persistable_json({"v": 1e-05})[1]) == {"v": 1e-05}
    big = 2**70
    assert funnel.persistable_json({"n": big})[1] == f'{{"n":{big}}}'
    assert funnel.persistable_json({"x": float("nan")})[1] == '{"x":NaN}'
    with pytest.raises(TypeError):
        funnel.persistable_json({"at": datetime.now(UTC)})


def test_event_ids_are_distinct_version_4_uuids() -> None:
    ids = new_event_ids(2000)
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
    assert new_event_ids(0) == []


def _reference_dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN."""
    return _reference_dumps(a) == _reference_dumps(b)
