"""KEDA's cron scaler as a pure function: `desiredReplicas` inside the window, 0 outside.

KEDA (pkg/scalers/cron_scaler.go) asks each expression for its next time after now, in the
trigger's timezone: the window is open when the next end comes no later than the next start
(the last start is behind us and its end is still ahead). Outside the window KEDA reports 1
against a target of 1 (one replica, then minReplicaCount); governor publishes 0, which the policy
clamps to minReplicas the same way and which keeps the workload inactive for scale to zero.

Expressions are standard five-field cron (minute hour day-of-month month day-of-week), as KEDA's
parser takes them; timezones are IANA names.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

if TYPE_CHECKING:
    from governor.spec import CronSource


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        from governor.spec import PolicyError

        raise PolicyError(
            "timezone", f"{name!r} is not an IANA time zone (e.g. Europe/Paris, Asia/Kolkata)"
        ) from None


def _next(expr: str, after: dt.datetime, field: str) -> dt.datetime:
    try:
        return next(CronSim(expr, after))
    except (CronSimError, StopIteration) as err:
        from governor.spec import PolicyError

        raise PolicyError(
            field, f"{expr!r} is not a five-field cron expression (m h dom mon dow): {err}"
        ) from None


def check_cron(spec: CronSource) -> None:
    """The spec's expressions and timezone parse, as KEDA's validation requires."""
    from governor.spec import PolicyError

    zone = _zone(spec.timezone)
    now = dt.datetime(2000, 1, 1, tzinfo=zone)
    _next(spec.start, now, "start")
    _next(spec.end, now, "end")
    if spec.start.split() == spec.end.split():
        raise PolicyError("end", "start and end must differ (KEDA: the window would be empty)")
    if spec.desired_replicas < 0:
        raise PolicyError("desiredReplicas", f"must be >= 0, got {spec.desired_replicas}")


def in_window(spec: CronSource, now: float) -> bool:
    zone = _zone(spec.timezone)
    # Whole seconds, as cron resolution and KEDA's Unix-second comparison.
    at = dt.datetime.fromtimestamp(int(now), tz=zone)
    return _next(spec.end, at, "end") <= _next(spec.start, at, "start")


def cron_value(spec: CronSource, now: float) -> float:
    """The number the cron source publishes at `now` (epoch seconds)."""
    return float(spec.desired_replicas) if in_window(spec, now) else 0.0
