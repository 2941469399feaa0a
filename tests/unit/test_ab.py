"""`governor ab` scoring against a case worked by hand."""

from __future__ import annotations

import pytest

from governor.events import WorkloadState
from governor_tools import ab

# 10 rps for two minutes, C = 5 per replica, start-up 10 s, one replica serving at the start.
LOAD = [(0.0, 10.0)]
ACTIVE = ab.Arm("shop/web", [(0.0, 2)])  # 2 from t=0: ready at t=10
SHADOW = ab.Arm("shop/web-shadow", [(0.0, 3), (60.0, 1)])  # 3, then 1 at t=60


def run(block: int) -> ab.Comparison:
    return ab.compare(LOAD, [ACTIVE, SHADOW], initial_replicas=1, start=0.0, end=120.0,
                      capacity_per_replica=5.0, startup_seconds=10.0, block_seconds=block,
                      resamples=500, seed=1)  # fmt: skip


def test_the_totals_are_the_hand_computed_ones() -> None:
    c = run(block=10)
    active, shadow = c.arms
    # Active: 1 ready (5 rps) for t in [0, 10) -> 10 violation-seconds; 2 asked for 120 s.
    assert active.violation_seconds.value == 10
    assert active.replica_hours.value == pytest.approx(2 * 120 / 3600)
    assert active.scale_events.value == 1
    # Shadow: the same first 10 s, then 1 replica (5 < 10) for [60, 120): 70; 3×60 + 1×60.
    assert shadow.violation_seconds.value == 70
    assert shadow.replica_hours.value == pytest.approx((3 * 60 + 1 * 60) / 3600)
    assert shadow.scale_events.value == 2
    d = c.differences["shop/web-shadow"]
    assert d["violation_seconds"].value == 60
    assert d["replica_hours"].value == pytest.approx(0.0)
    # 6 of 12 ten-second blocks differ by 10: resampled sums stay well away from 0.
    assert d["violation_seconds"].significant and d["violation_seconds"].low >= 20
    assert not d["replica_hours"].significant  # the same replica-hours in total, not per block
    (line,) = ab.verdict(c)
    assert line.startswith("neither dominates: shop/web violates less")
    assert "significant in violation_seconds" in line


def test_with_two_blocks_the_same_difference_is_not_significant() -> None:
    d = run(block=60).differences["shop/web-shadow"]["violation_seconds"]
    assert (d.value, d.low, d.high) == (60, 0, 120) and not d.significant


def test_each_interval_holds_its_value() -> None:
    for arm in run(block=10).arms:
        for iv in (arm.violation_seconds, arm.replica_hours, arm.scale_events):
            assert iv.low <= iv.value <= iv.high


def test_startup_is_measured_from_the_workload_states() -> None:
    states = [
        WorkloadState(workload="w", spec_replicas=1, ready_replicas=1, observed_at=0.0),
        WorkloadState(workload="w", spec_replicas=3, ready_replicas=1, observed_at=5.0),
        WorkloadState(workload="w", spec_replicas=3, ready_replicas=2, observed_at=12.0),
        WorkloadState(workload="w", spec_replicas=3, ready_replicas=3, observed_at=20.0),
    ]
    assert ab.startup_from_states(states) == 15.0
    assert ab.startup_from_states(states[:1], default=42.0) == 42.0


def test_a_per_pod_series_is_scored_on_its_per_instant_total() -> None:
    from governor.events import LoadWindow
    from governor_tools.cli.ab import Records

    r = Records("demo/Deployment/web", since=0.0)
    common = dict(workload="demo/Deployment/web", metric="rps", window="stable", start=0.0,
                  count=40, max=12.0, p95=12.0, newest_sample=9.5)  # fmt: skip
    r.add(LoadWindow(end=10.0, mean=10.0, instants=10, total_mean=200.0, **common), "governor.load")
    r.add(LoadWindow(end=20.0, mean=10.0, **common), "governor.load")  # not per-pod: the mean
    assert r.load["rps"] == [(10.0, 200.0), (20.0, 10.0)]
