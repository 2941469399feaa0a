"""The live validation's phase match: the reference HPA synced where the real controller did."""

from __future__ import annotations

import pytest

from governor_tools import hpa_live
from governor_tools.sim.replay import SimConfig
from governor_tools.sim.traces import Trace, from_rows


@pytest.mark.parametrize("phase", [0.0, 3.0, 7.0, 14.0])
def test_the_phase_is_read_from_the_times_the_live_series_changed(phase: float) -> None:
    # changes seen 0.5 s after each sync (run_live's poll), every 15 s from `phase`
    live = [(0.0, 2)] + [(phase + 0.5 + 15 * k, 3 + k % 2) for k in range(1, 9)]
    assert hpa_live.sync_phase(live) == pytest.approx(phase, abs=1e-6)


def test_no_change_no_phase() -> None:
    assert hpa_live.sync_phase([(0.0, 2)]) == 0.0


def _trace() -> Trace:
    # on/off every 10 s: a load whose replicas depend on where in its period HPA syncs
    ts = [float(10 * i) for i in range(90)]
    vs = [100.0 if (i // 2) % 2 else 10.0 for i in range(90)]
    return from_rows("onoff", ts, vs, 10.0)


def test_phase_zero_is_the_simulator_itself() -> None:
    trace = _trace()
    config = SimConfig(capacity_per_replica=5.0, startup_seconds=20.0)
    assert hpa_live.simulated_at(trace, config, 0.0)[1] == hpa_live.simulated(trace, config)[1]


def test_the_phase_moves_the_syncs_on_a_load_that_changes_within_a_period() -> None:
    trace = _trace()
    config = SimConfig(capacity_per_replica=5.0, startup_seconds=20.0)
    _, at5 = hpa_live.simulated_at(trace, config, 5.0)
    _, at0 = hpa_live.simulated(trace, config)
    assert at5 != at0
    # every change of the moved run falls 5 s after a multiple of 15 s of the trace's time
    assert all(round(t - 5.0) % 15 == 0 for t, _ in at5[1:])
