"""The cron source: KEDA's window arithmetic on a fake clock, in the trigger's timezone (DST
included), and the spec's validation."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.policy.cron import cron_value, in_window
from governor.spec import CronSource, TargetRef
from governor_collector.sources import SourceContext, SourceTarget, create_source


def at(zone: str, *parts: int) -> float:
    return dt.datetime(*parts, tzinfo=ZoneInfo(zone)).timestamp()  # type: ignore[misc]


KOLKATA = CronSource(
    timezone="Asia/Kolkata", start="0 6 * * *", end="0 20 * * *", desired_replicas=10
)


@pytest.mark.parametrize(
    ("hour", "minute", "want"),
    [(5, 59, 0), (6, 0, 10), (13, 30, 10), (19, 59, 10), (20, 0, 0), (23, 0, 0)],
)
def test_desired_replicas_inside_the_window_zero_outside(hour: int, minute: int, want: int) -> None:
    assert cron_value(KOLKATA, at("Asia/Kolkata", 2026, 3, 1, hour, minute)) == want


def test_the_window_is_in_the_triggers_timezone_not_utc() -> None:
    # 06:30 in Kolkata is 01:00 UTC: open; 06:30 UTC is 12:00 in Kolkata: open; 15:00 UTC is
    # 20:30 in Kolkata: closed although 15:00 is between 6 and 20.
    assert in_window(KOLKATA, at("UTC", 2026, 3, 1, 1, 0))
    assert not in_window(KOLKATA, at("UTC", 2026, 3, 1, 15, 0))


def test_a_window_across_midnight_and_weekdays() -> None:
    night = CronSource(
        timezone="Europe/Paris", start="0 22 * * 1-5", end="0 6 * * 2-6", desired_replicas=3
    )
    assert in_window(night, at("Europe/Paris", 2026, 6, 1, 23, 0))  # Monday night
    assert in_window(night, at("Europe/Paris", 2026, 6, 2, 5, 59))  # Tuesday before 6
    assert not in_window(night, at("Europe/Paris", 2026, 6, 2, 12, 0))
    assert not in_window(night, at("Europe/Paris", 2026, 6, 6, 23, 0))  # Saturday night


def test_daylight_saving_keeps_local_hours() -> None:
    office = CronSource(
        timezone="Europe/Paris", start="0 9 * * *", end="0 17 * * *", desired_replicas=4
    )
    # 08:30 UTC is 09:30 in winter (CET, open) but 10:30 in summer (CEST, open); 07:30 UTC is
    # 08:30 in winter (closed) and 09:30 in summer (open).
    assert not in_window(office, at("UTC", 2026, 1, 15, 7, 30))
    assert in_window(office, at("UTC", 2026, 7, 15, 7, 30))


@given(st.integers(min_value=1_700_000_000, max_value=1_900_000_000))
def test_value_is_desired_or_zero_and_agrees_with_the_window(now: int) -> None:
    value = cron_value(KOLKATA, now)
    assert value == (10 if in_window(KOLKATA, now) else 0)
    local = dt.datetime.fromtimestamp(now, ZoneInfo("Asia/Kolkata"))
    assert in_window(KOLKATA, now) == (6 <= local.hour < 20)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("timezone", "Mars/Olympus", "IANA"),
        ("start", "0 25 * * *", "cron"),
        ("end", "@daily", "five-field"),
        ("end", "0 6 * * *", "must differ"),
        ("desiredReplicas", -1, ">= 0"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(field: str, value: object, problem: str) -> None:
    doc = {"timezone": "UTC", "start": "0 6 * * *", "end": "0 20 * * *", "desiredReplicas": 2}
    doc[field] = value
    with pytest.raises(msgspec.ValidationError, match=problem) as err:
        msgspec.convert(doc, CronSource)
    assert field in str(err.value)


async def test_the_collector_source_publishes_the_value_at_now() -> None:
    target = SourceTarget(
        workload="default/Deployment/my-deployment",
        metric="cron",
        namespace="default",
        target_ref=TargetRef(kind="Deployment", name="my-deployment"),
    )
    source = create_source(target, KOLKATA, SourceContext())
    (inside,) = await source.collect(at("Asia/Kolkata", 2026, 3, 1, 7, 0))
    (outside,) = await source.collect(at("Asia/Kolkata", 2026, 3, 1, 21, 0))
    assert (inside.value, inside.labels["window"]) == (10, "open")
    assert (outside.value, outside.labels["window"]) == (0, "closed")
    assert inside.timestamp == at("Asia/Kolkata", 2026, 3, 1, 7, 0)
