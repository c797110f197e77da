"""When a schedule's ticks fall: a cron expression in an IANA time zone, or a fixed interval.

Pure functions of the schedule's fields, so every replica computes the same ticks: cron ticks
come from croniter in the schedule's own zone (a daily `0 9 * * *` in Europe/Paris stays at
09:00 local across daylight-saving changes; a local time the change skips fires at the first
valid instant after it), interval ticks lie on a fixed grid `anchor + k * interval`, so a
late or retried tick never shifts the ones after it.

`plan` decides what a due schedule does now (the missed-tick policy): a tick more than
`grace` old is *missed*; `skip` drops every missed tick, `run_once` fires once for all of
them (the newest), like APScheduler's `misfire_grace_time` and `coalesce`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from app.runtime.errors import InvalidRequest

MIN_INTERVAL_SECONDS = 1
MAX_INTERVAL_SECONDS = 366 * 86_400
# Missed cron ticks counted one by one at most (a schedule down for years): past it, the
# count says "at least" (an interval's count is exact arithmetic).
_MAX_COUNTED = 10_000


class InvalidSchedule(InvalidRequest):
    """A cron expression, time zone or interval that cannot be used (422)."""

    code = "invalid_schedule"


@dataclass(frozen=True, slots=True)
class Cadence:
    """A schedule's timing: exactly one of `cron` (with `timezone`) and `interval_seconds`."""

    cron: str | None
    timezone: str
    interval_seconds: int | None
    anchor: datetime  # interval grid origin (the schedule's creation or last change)

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after `moment` (UTC)."""
        if self.interval_seconds is not None:
            step = self.interval_seconds
            elapsed = (moment - self.anchor).total_seconds()
            tick = self.anchor + timedelta(seconds=max(math.floor(elapsed / step) + 1, 0) * step)
            while tick <= moment:  # float rounding at a grid point
                tick += timedelta(seconds=step)
            return tick
        return self._cron(moment).get_next(datetime).astimezone(UTC)

    def last_before(self, moment: datetime) -> datetime:
        """The last tick strictly before `moment` (UTC)."""
        if self.interval_seconds is not None:
            return self.next_after(moment - timedelta(microseconds=1)) - timedelta(
                seconds=self.interval_seconds
            )
        return self._cron(moment).get_prev(datetime).astimezone(UTC)

    def count(self, first: datetime, until: datetime) -> int:
        """How many ticks lie in [first, until), `first` being one (exact for an interval;
        for cron, counted one by one up to _MAX_COUNTED)."""
        if self.interval_seconds is not None:
            return round((until - first).total_seconds() / self.interval_seconds)
        n, tick = 0, first
        while tick < until and n < _MAX_COUNTED:
            n, tick = n + 1, self.next_after(tick)
        return n

    def _cron(self, moment: datetime) -> croniter:
        assert self.cron is not None
        return croniter(self.cron, moment.astimezone(ZoneInfo(self.timezone)))


def cadence_of(
    *, cron: str | None, timezone: str | None, interval_seconds: int | None, anchor: datetime
) -> Cadence:
    """A checked cadence.

    Raises:
        InvalidSchedule: neither or both of cron and interval, a cron expression croniter
            refuses (or one with other than 5 fields), an unknown IANA zone, or an interval
            out of range.
    """
    if (cron is None) == (interval_seconds is None):
        raise InvalidSchedule("give exactly one of cron and interval_seconds")
    zone = timezone or "UTC"
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"unknown time zone {zone!r} (an IANA name such as Europe/Paris)"
        ) from None
    if interval_seconds is not None:
        if not MIN_INTERVAL_SECONDS <= interval_seconds <= MAX_INTERVAL_SECONDS:
            raise InvalidSchedule(
                f"interval_seconds must be {MIN_INTERVAL_SECONDS}..{MAX_INTERVAL_SECONDS}"
            )
        return Cadence(None, zone, interval_seconds, anchor)
    assert cron is not None
    text = " ".join(cron.split())
    fields = text.split(" ")
    if not (text.startswith("@") or len(fields) == 5) or not croniter.is_valid(text):
        raise InvalidSchedule(
            f"not a cron expression: {cron!r} (five fields: minute hour day month weekday)"
        )
    cadence = Cadence(text, zone, None, anchor)
    try:
        cadence.next_after(anchor)  # e.g. "0 0 31 2 *" parses but never fires
    except Exception:  # croniter raises its own errors (CroniterBadDateError, ...)
        raise InvalidSchedule(f"cron expression {cron!r} never fires") from None
    return cadence


@dataclass(frozen=True, slots=True)
class Plan:
    """What a due schedule does now.

    `fire`: the tick to fire (None: fire nothing). `skipped`: (first missed tick, how many)
    of the ticks dropped, if any. `next_fire_at`: where the schedule goes when nothing fires.
    """

    fire: datetime | None
    skipped: tuple[datetime, int] | None
    next_fire_at: datetime


def plan(cadence: Cadence, due: datetime, now: datetime, *, grace: float, missed: str) -> Plan:
    """Decide on the due tick `due` at `now`: fire it, or apply the missed-tick policy."""
    cutoff = now - timedelta(seconds=grace)
    if due >= cutoff:
        return Plan(fire=due, skipped=None, next_fire_at=cadence.next_after(due))
    # Every tick in [due, cutoff) is missed; `following`, the first one at or after the
    # cutoff, is still on time.
    following = cadence.next_after(cutoff - timedelta(microseconds=1))
    count = max(cadence.count(due, following), 1)
    if missed == "run_once":
        skipped = (due, count - 1) if count > 1 else None
        return Plan(fire=cadence.last_before(following), skipped=skipped, next_fire_at=following)
    return Plan(fire=None, skipped=(due, count), next_fire_at=following)
