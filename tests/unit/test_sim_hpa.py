"""The reference HPA in the simulator, against small traces computed by hand from HPA's rules.

Common setup: C = 10 per replica, target utilization 0.5, so the External AverageValue target is
5 per replica; start-up 60 s; the HPA syncs every 15 s (decisions at 15, 30, ...) and at `now` sees
the load averaged over [now-30, now-15) (one sync period, one scrape late). The run starts warm
with ceil(first load / 5) replicas serving.

HPA rules used below (autoscaling/v2 defaults):
  desired = ceil(load / 5) unless load / (5 × current) is within [0.9, 1.1] (then: current);
  scale-up limit per 15 s: max(2 × periodStart, periodStart + 4), where periodStart = current
  minus what was added in (now-15, now] (a change exactly 15 s ago is outside: HPA's `After`);
  scale-down: the max of the recommendations made in (now-300, now]; then min 1.
"""

from __future__ import annotations

import pytest

from governor_tools.sim.policies import HPA_SYNC_SECONDS
from governor_tools.sim.replay import Run, SimConfig
from governor_tools.sim.runs import policy_evaluate, run_hpa
from governor_tools.sim.traces import from_rows

CONFIG = SimConfig(capacity_per_replica=10, startup_seconds=60, target_utilization=0.5)


def _hpa(rows: list[tuple[float, float]], step: float) -> Run:
    trace = from_rows("hand", [t for t, _ in rows], [v for _, v in rows], step=step)
    return run_hpa(trace, CONFIG, policy_evaluate())


def _requested(run: Run) -> dict[float, int]:
    return {r.timestamp: r.replicas_requested for r in run.rows}


def _expected_hours(schedule: list[tuple[float, int]], end: float) -> float:
    """Σ requested × 15 s over the decisions 15, 30, ... < end, from (since, replicas) pairs."""
    total = 0
    now = HPA_SYNC_SECONDS
    while now < end:
        total += [n for since, n in schedule if since <= now][-1]
        now += HPA_SYNC_SECONDS
    return total * HPA_SYNC_SECONDS / 3600


def test_step_up_and_back_down() -> None:
    # Load 10 until 300, 40 until 600, then 10 until the end (1500).
    run = _hpa([(0, 10), (300, 40), (600, 10), (900, 10), (1200, 10)], step=300)
    req = _requested(run)
    # Initial: ceil(10/5) = 2. At 315 HPA still sees [285,300) = 10: ratio 10/(5×2) = 1 -> 2.
    assert req[315] == 2
    # At 330 it sees [300,315) = 40: desired ceil(40/5) = 8, limited to max(2×2, 2+4) = 6.
    assert req[330] == 6
    # At 345 the change at 330 is exactly 15 s old (outside the period): limit max(12, 10) -> 8.
    assert req[345] == 8
    # From 630 it sees 10 -> raw desired 2, but the last 8 was recommended at 615: held until
    # 615 leaves (now-300, now], i.e. at 915; the down rate (100 %/15 s) allows the whole drop.
    assert req[900] == 8
    assert req[915] == 2
    s = run.summary
    # 2 serve until 6 are ready at 330 + 60 = 390: load 40 > 20 over [300, 390).
    assert s.violation_seconds == 90
    load_seconds = 300 * 10 + 300 * 40 + 900 * 10
    assert s.unserved_fraction == pytest.approx((40 - 20) * 90 / load_seconds)
    assert s.scale_events == 3  # 2 -> 6 -> 8 -> 2
    assert s.peak_replicas == 8
    plan = [(0, 2), (330, 6), (345, 8), (915, 2)]
    assert s.replica_hours == pytest.approx(_expected_hours(plan, 1500))


def test_ramp() -> None:
    # 10, 20, 30, 40 for 30 s each, then 50. Windows [now-30, now-15) fall inside one row.
    run = _hpa([(0, 10), (30, 20), (60, 30), (90, 40), (120, 50), (150, 50)], step=30)
    req = _requested(run)
    # now=60 sees 20: ratio 20/10 = 2 -> 4 (limit 6); 90 sees 30: 30/20 -> 6; 120 sees 40:
    # 40/30 = 1.33 -> 8; 150 sees 50: 50/40 = 1.25 -> 10. In between, ratio 1: no change.
    assert [req[t] for t in (45, 60, 75, 90, 105, 120, 135, 150, 165)] == [
        2,
        4,
        4,
        6,
        6,
        8,
        8,
        10,
        10,
    ]
    # Capacity 20 until 120, 40 from 120, 60 from 150: violated over [60,90) (30 > 20),
    # [90,120) (40 > 20) and [120,150) (50 > 40).
    assert run.summary.violation_seconds == 90
    unserved = 30 * (30 - 20) + 30 * (40 - 20) + 30 * (50 - 40)
    total = 30 * (10 + 20 + 30 + 40) + 60 * 50
    assert run.summary.unserved_fraction == pytest.approx(unserved / total)
    assert run.summary.peak_replicas == 10


def test_spike() -> None:
    # A 15 s spike to 100 at 300, otherwise 10; the trace ends at 900.
    run = _hpa([(0, 10), (300, 100), (315, 10), (600, 10)], step=300)
    req = _requested(run)
    # At 330 HPA sees the spike's [300,315) = 100: desired 20, limited to max(4, 6) = 6.
    assert req[315] == 2
    assert req[330] == 6
    # Then raw desired is 2 again, but 20 was recommended at 330: held until 630.
    assert req[615] == 6
    assert req[630] == 2
    # The spike itself is unserved: 100 > 20 over [300, 315); the 6 arrive at 390, too late.
    assert run.summary.violation_seconds == 15
    assert run.summary.scale_events == 2
    assert run.summary.peak_replicas == 6


def test_outage_to_zero_and_back() -> None:
    # 20 until 300, 0 until 900, 20 until 1200.
    run = _hpa([(0, 20), (300, 0), (900, 20)], step=300)
    req = _requested(run)
    # Initial ceil(20/5) = 4. From 330 HPA sees 0: raw desired ceil(0/5) = 0, held by the
    # recommendation of 4 made at 315 until 615; then 0, clamped to minReplicas 1.
    assert req[600] == 4
    assert req[615] == 1
    # At 930 it sees 20 again: ratio 20/5 = 4 -> 4, within max(2×1, 1+4) = 5.
    assert req[915] == 1
    assert req[930] == 4
    # 1 replica serves 10 < 20 over [900, 990).
    assert run.summary.violation_seconds == 90
    assert run.summary.unserved_fraction == pytest.approx(10 * 90 / (20 * 300 + 20 * 300))
    assert run.summary.scale_events == 2
