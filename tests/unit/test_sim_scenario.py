"""Cluster scenario: a high-priority service's burst against an elastic GPU training job,
through DeciderCore (stage 1 + stage 2), with and without rebalance (examples/scenarios)."""

from __future__ import annotations

from pathlib import Path

import pytest

from governor_tools.sim.scenario import (
    RunResult,
    ScenarioError,
    load_scenario,
    run_scenario,
)
from governor_tools.sim.scenario_report import write_outputs

EXAMPLE = Path(__file__).parents[2] / "examples" / "scenarios" / "burst-vs-training.yaml"
WEB, TRAIN = "sim/Deployment/web", "sim/PyTorchJob/trainer"
BURST = (900.0, 1500.0)
FLOOR = 4
# 2 forced shrinks as the service ramps up, 1 grow after it scales in (batched), 1 per failure.
RESTART_BOUND_BEFORE_FAILURES = 3
RESTART_BOUND = 5


def series(run: RunResult, workload: str, field: str) -> dict[float, int]:
    return {r.t: getattr(r, field) for r in run.rows if r.workload == workload}


@pytest.fixture(scope="module")
def result():  # type: ignore[no-untyped-def]
    spec = load_scenario(EXAMPLE)
    return spec, run_scenario(spec)


def test_burst_shrinks_the_job_the_service_keeps_its_slo_and_the_gpus_come_back(
    result,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    spec, res = result
    reb, alone, no = res.runs["rebalance"], res.runs["alone"], res.runs["no-rebalance"]
    web_reb = reb.summary[WEB].violation_seconds
    web_alone = alone.summary[WEB].violation_seconds
    web_no = no.summary[WEB].violation_seconds

    # The service's violations stay within 10 % of running alone on an empty pool ...
    assert web_alone > 0
    assert web_reb <= 1.10 * web_alone
    # ... while without rebalance its burst replicas stay pending: the whole burst violates.
    assert web_no >= 10 * web_reb
    assert web_no >= 0.9 * (BURST[1] - BURST[0])
    assert no.summary[WEB].shortfall_seconds > 0

    # The job is shrunk to its floor during the burst and gets its GPUs back after it.
    ready = series(reb, TRAIN, "ready")
    during = [n for t, n in ready.items() if BURST[0] + 60 <= t <= BURST[1]]
    assert min(during) == max(during) == FLOOR
    before = ready[BURST[0] - 5]
    assert ready[2400.0] == before == 12
    # Restarts: each is a membership change; bounded.
    restarts = series(reb, TRAIN, "restarts")
    assert restarts[2400.0] <= RESTART_BOUND_BEFORE_FAILURES
    assert reb.summary[TRAIN].restarts <= RESTART_BOUND
    # The shortfall topic names the job while it is short, and not on every tick.
    job_shortfalls = [s for s in reb.shortfalls if s[1] == TRAIN]
    assert any(s[3] == FLOOR for s in job_shortfalls)
    assert len(job_shortfalls) <= 8

    # The failures (a NIC at 2700 s, a GPU at 3000 s) cost the job, not the service.
    assert ready[2695.0] == 12 and ready[2800.0] < 12
    assert min(n for t, n in series(reb, WEB, "ready").items() if t >= 2700) == 4
    assert any(s[0] > 2700 and s[1] == TRAIN for s in reb.shortfalls)

    # Outputs: summary, CSVs, the side-by-side plot and the HTML report.
    paths = write_outputs(res, spec, tmp_path)
    assert paths["plot"].stat().st_size > 10_000
    assert "rebalance" in paths["html"].read_text()
    assert (tmp_path / "rows-no-rebalance.csv").is_file()
    print(
        f"\nweb violation s: rebalance {web_reb}, alone {web_alone}, no-rebalance {web_no}; "
        f"trainer restarts {reb.summary[TRAIN].restarts}, progress "
        f"{reb.summary[TRAIN].progress:.0f} (no-rebalance {no.summary[TRAIN].progress:.0f}), "
        f"GPU-h trainer {reb.summary[TRAIN].gpu_hours:.2f} web {reb.summary[WEB].gpu_hours:.2f}"
    )


def test_scenario_errors_name_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("{at: 2700, node: gpu-1", "{at: 2700, node: gpu-9"))
    with pytest.raises(ScenarioError, match="unknown node 'gpu-9'"):
        load_scenario(bad)
    bad.write_text(EXAMPLE.read_text().replace("name: load", "name: rps", 1))
    with pytest.raises(ScenarioError, match="one metric named 'load'"):
        load_scenario(bad)
