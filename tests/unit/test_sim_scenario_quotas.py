"""The teams-quotas-queues scenario: two teams' Volcano queues and a namespace quota bind;
quota- and queue-aware rebalance against HPA-like scaling (examples/scenarios)."""

from __future__ import annotations

from pathlib import Path

import pytest

from governor_tools.sim.scenario import (
    ScenarioError,
    ScenarioSpec,
    check,
    load_scenario,
    run_scenario,
)

EXAMPLE = Path(__file__).parents[2] / "examples" / "scenarios" / "teams-quotas-queues.yaml"
WEB, API, TRAIN = "shop/Deployment/web", "shop/Deployment/api", "lab/Job/trainer"
CAPABILITY = 16  # the research queue's GPUs
QUOTA_CPU = 40.0


@pytest.fixture(scope="module")
def result():  # type: ignore[no-untyped-def]
    spec = load_scenario(EXAMPLE)
    return spec, run_scenario(spec)


def test_aware_rebalance_asks_for_nothing_the_quota_or_queue_refuses(result) -> None:  # type: ignore[no-untyped-def]
    _, res = result
    reb, hpa = res.runs["rebalance"], res.runs["no-rebalance"]
    for w in (WEB, API, TRAIN):
        assert reb.summary[w].failed_replica_seconds == 0, w
        assert reb.summary[w].pending_replica_seconds == 0, w
    # HPA-like: the burst's replicas fail creation on the quota, the job's over its queue's
    # capability stay pending the whole run.
    assert hpa.summary[WEB].failed_replica_seconds > 0
    assert hpa.summary[TRAIN].pending_replica_seconds == (24 - CAPABILITY) * 2400
    # The quota goes to the higher tier: the burst is served, api yields.
    assert reb.summary[WEB].violation_seconds * 5 < hpa.summary[WEB].violation_seconds
    assert reb.summary[API].violation_seconds > hpa.summary[API].violation_seconds


def test_the_quota_and_queue_hold_in_both_runs_and_reasons_name_them(result) -> None:  # type: ignore[no-untyped-def]
    spec, res = result
    cpu = {w.name: w.requests.get("cpu", 0.0) for w in spec.workloads}
    for run in res.runs.values():
        by_t: dict[float, dict[str, int]] = {}
        for r in run.rows:
            by_t.setdefault(r.t, {})[r.workload] = r.bound
        for t, bound in by_t.items():
            used = bound.get(WEB, 0) * cpu["web"] + bound.get(API, 0) * cpu["api"]
            assert used <= QUOTA_CPU, (run.name, t, used)
            assert bound.get(TRAIN, 0) <= CAPABILITY
    reasons = [why for _, _, _, _, why in res.runs["rebalance"].shortfalls]
    assert any(r.startswith("capacity: quota: shop/compute-quota requests.cpu") for r in reasons)
    assert any("queue: research capability nvidia.com/gpu 16/16 -> 16" in r for r in reasons)


def test_unknown_queues_are_named(result) -> None:  # type: ignore[no-untyped-def]
    spec, _ = result
    bad: ScenarioSpec = spec.__class__(
        **{
            **{f: getattr(spec, f) for f in spec.__struct_fields__},
            "workloads": [
                w.__class__(**{**{f: getattr(w, f) for f in w.__struct_fields__}, "queue": "nope"})
                for w in spec.workloads
            ],
        }
    )
    with pytest.raises(ScenarioError, match=r"workloads\[web\]\.queue: unknown queue 'nope'"):
        check(bad)
