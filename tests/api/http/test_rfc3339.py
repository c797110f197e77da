"""Every timestamp leaves the service as `isoformat()` of the time in UTC with `Z` for
`+00:00` (a naive time taken to be UTC): `rfc3339` writes it through orjson, which must agree
with that rule for every time and zone, and so must the frames written in one orjson call."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.http.views import event_json, event_json_bytes, rfc3339
from app.runtime.session.events import EventType, NewEvent


def by_the_rule(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


class Stamp(datetime):
    """A subclass of datetime, which orjson does not write."""


ZONES = st.one_of(
    st.none(),
    st.just(UTC),
    st.sampled_from(
        [ZoneInfo("Europe/London"), ZoneInfo("Asia/Kolkata"), ZoneInfo("America/St_Johns")]
    ),
    st.builds(lambda s: timezone(timedelta(seconds=s)), st.integers(-86_399, 86_399)),
)


def outcome(write: object, value: datetime) -> object:
    try:
        return write(value)  # type: ignore[operator]
    except OverflowError as exc:  # a time that has no UTC equivalent
        return type(exc)


@given(st.datetimes(timezones=ZONES))
def test_rfc3339_is_isoformat_in_utc_with_z(value: datetime) -> None:
    assert outcome(rfc3339, value) == outcome(by_the_rule, value)


@pytest.mark.parametrize(
    "value",
    [
        Stamp(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        Stamp(2026, 1, 2, 3, 4, 5, 6),
        Stamp(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2))),
    ],
)
def test_a_subclass_of_datetime_is_written_by_the_same_rule(value: datetime) -> None:
    assert rfc3339(value) == by_the_rule(value)


@given(st.datetimes(timezones=ZONES))
def test_an_events_bytes_are_its_json_written_compactly(created_at: datetime) -> None:
    payload = {"text": 'é "q"', "n": 2**70 if created_at.microsecond % 2 else 1}
    event = NewEvent(EventType.MODEL_RESPONSE, payload).stored("e", "s", 3, payload, created_at, 9)
    try:
        expected = json.dumps(event_json(event), separators=(",", ":"), ensure_ascii=False)
    except OverflowError:
        return
    assert event_json_bytes(event) == expected.encode()
