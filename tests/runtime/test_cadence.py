"""Cadence (pure): cron ticks in an IANA zone across daylight-saving changes, the interval
grid, and the missed-tick plan, which accounts for every tick exactly once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.runtime.schedules.cadence import Cadence, InvalidSchedule, cadence_of, plan

ANCHOR = datetime(2026, 3, 1, tzinfo=UTC)


def _cron(expr: str, zone: str) -> Cadence:
    return cadence_of(cron=expr, timezone=zone, interval_seconds=None, anchor=ANCHOR)


def test_a_daily_cron_keeps_its_local_time_across_daylight_saving() -> None:
    daily = _cron("0 9 * * *", "Europe/Paris")
    before = daily.next_after(datetime(2026, 3, 28, 12, tzinfo=UTC))  # Sunday 29th: CEST
    assert before == datetime(2026, 3, 29, 7, tzinfo=UTC)
    winter = daily.next_after(datetime(2026, 3, 27, 12, tzinfo=UTC))
    assert winter == datetime(2026, 3, 28, 8, tzinfo=UTC)


def test_a_local_time_the_change_skips_fires_at_the_first_instant_after_it() -> None:
    skipped = _cron("30 2 * * *", "Europe/Paris")  # 02:30 does not exist on 29 March
    tick = skipped.next_after(datetime(2026, 3, 28, 23, tzinfo=UTC))
    assert tick == datetime(2026, 3, 29, 1, tzinfo=UTC)  # 03:00 CEST


def test_an_interval_is_a_grid_from_its_anchor() -> None:
    every = cadence_of(cron=None, timezone="UTC", interval_seconds=90, anchor=ANCHOR)
    assert every.next_after(ANCHOR) == ANCHOR + timedelta(seconds=90)
    assert every.next_after(ANCHOR + timedelta(seconds=100)) == ANCHOR + timedelta(seconds=180)
    assert every.last_before(ANCHOR + timedelta(seconds=180)) == ANCHOR + timedelta(seconds=90)
    assert every.count(ANCHOR, ANCHOR + timedelta(seconds=900)) == 10


@pytest.mark.parametrize(
    "fields",
    [
        {"cron": "0 25 * * *"},
        {"cron": "0 9 * * *", "timezone": "Europe/Pariss"},
        {"cron": "0 9 * * *", "interval_seconds": 60},
        {"interval_seconds": -1},
        {},
    ],
)
def test_bad_cadences_are_refused(fields: dict) -> None:
    args = {"cron": None, "timezone": "UTC", "interval_seconds": None, **fields}
    with pytest.raises(InvalidSchedule):
        cadence_of(**args, anchor=ANCHOR)


@given(
    step=st.integers(min_value=1, max_value=600),
    late=st.floats(min_value=0, max_value=50_000, allow_nan=False),
    grace=st.floats(min_value=0, max_value=3_600, allow_nan=False),
    missed=st.sampled_from(["skip", "run_once"]),
)
def test_the_plan_accounts_for_every_tick_once(
    step: int, late: float, grace: float, missed: str
) -> None:
    every = cadence_of(cron=None, timezone="UTC", interval_seconds=step, anchor=ANCHOR)
    due = every.next_after(ANCHOR)
    now = due + timedelta(seconds=late)
    decided = plan(every, due, now, grace=grace, missed=missed)
    covered = decided.skipped[1] if decided.skipped else 0
    if decided.fire is not None:
        covered += 1
        assert decided.fire <= now
        # What fires is the tick right after the skipped ones.
        first, count = decided.skipped or (due, 0)
        assert decided.fire == first + timedelta(seconds=count * step)
    # Every tick from the due one up to the next tick is accounted for, once.
    assert covered == every.count(due, decided.next_fire_at)
    assert decided.next_fire_at > (decided.fire or due)
    if timedelta(seconds=late) <= timedelta(seconds=grace):  # as the plan rounds them
        assert decided.fire == due and decided.skipped is None
    elif missed == "skip":
        assert decided.fire is None
    else:
        assert decided.fire is not None
