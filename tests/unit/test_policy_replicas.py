"""HPA parity for one metric: ports of kubernetes replica_calculator_test.go (aggregate form).

Each upstream case is turned into what governor sees: the ready pods' average utilization (or
the metric's total), spec replicas and ready replicas. Utilization levels are computed here from
the upstream per-pod numbers exactly as HPA does (Σusage×100/Σrequests over pods with metrics).

Not portable, because they need per-pod metrics: the "missing metrics" cases
(TestReplicaCalcMissingMetrics*, TestReplicaCalcDuringRollingUpdateWithMaxSurge), container
metrics and pod-metric (Pods source) cases; failed/deleted pods are simply not counted here.
"""

from __future__ import annotations

import math

import pytest

from governor.policy.replicas import (
    DEFAULT_TOLERANCES,
    Tolerances,
    per_pod_replicas,
    raw_replicas,
    usage_ratio_replicas,
    utilization_replicas,
    whole_percent,
)


def util(levels_milli: list[int], requests_milli: list[int]) -> int:
    """metricsclient.GetResourceUtilizationRatio's currentUtilization (integer division)."""
    return sum(levels_milli) * 100 // sum(requests_milli)


# --- resource utilization (GetResourceReplicas) ------------------------------------------------

RESOURCE_CASES = [
    # name, current, ready, levels of the ready pods, requests of those pods, target, expected
    ("TestReplicaCalcScaleUp", 3, 3, [300, 500, 700], [1000] * 3, 30, 5),
    # pod 0 unready: its metric is dropped, it counts 0 % on scale-up
    ("TestReplicaCalcScaleUpUnreadyLessScale", 3, 2, [500, 700], [1000] * 2, 30, 4),
    # a hot-CPU pod is treated exactly like an unready one
    ("TestReplicaCalcScaleUpHotCpuLessScale", 3, 2, [500, 700], [1000] * 2, 30, 4),
    ("TestReplicaCalcScaleUpUnreadyNoScale", 3, 1, [400], [1000], 30, 3),
    ("TestReplicaCalcScaleHotCpuNoScale", 3, 1, [400], [1000], 30, 3),
    ("TestReplicaCalcScaleUpIgnoresFailedPods", 2, 2, [500, 700], [1000] * 2, 30, 4),
    ("TestReplicaCalcScaleUpIgnoresDeletionPods", 2, 2, [500, 700], [1000] * 2, 30, 4),
    ("TestReplicaCalcScaleDown", 5, 5, [100, 300, 500, 250, 250], [1000] * 5, 50, 3),
    ("TestReplicaCalcScaleDownExcludeUnreadyPods", 5, 3, [100, 300, 500], [1000] * 3, 50, 2),
    ("TestReplicaCalcScaleDownExcludeUnscheduledPods", 5, 1, [100], [1000], 50, 1),
    ("TestReplicaCalcScaleDownIgnoreHotCpuPods", 5, 3, [100, 300, 500], [1000] * 3, 50, 2),
    (
        "TestReplicaCalcScaleDownIgnoresFailedPods",
        5,
        5,
        [100, 300, 500, 250, 250],
        [1000] * 5,
        50,
        3,
    ),
    (
        "TestReplicaCalcScaleDownIgnoresDeletionPods",
        5,
        5,
        [100, 300, 500, 250, 250],
        [1000] * 5,
        50,
        3,
    ),
    ("TestReplicaCalcTolerance", 3, 3, [1010, 1030, 1020], [900, 1000, 1100], 100, 3),
    # metrics of pods that are not the target's are ignored: 4 pods, 6 metrics
    ("TestReplicaCalcSuperfluousMetrics", 4, 4, [4000, 9500, 3000, 7000], [1000] * 4, 100, 24),
]


@pytest.mark.parametrize(
    ("name", "current", "ready", "levels", "requests", "target", "expected"),
    RESOURCE_CASES,
    ids=[c[0] for c in RESOURCE_CASES],
)
def test_replica_calc_resource(
    name: str,
    current: int,
    ready: int,
    levels: list[int],
    requests: list[int],
    target: int,
    expected: int,
) -> None:
    observed = util(levels, requests)
    assert utilization_replicas(current, ready, observed, target, DEFAULT_TOLERANCES) == expected


def test_TestReplicaCalcComputedToleranceAlgImplementation() -> None:
    start_pods = 10
    used = start_pods * 150
    requested = 2 * used
    requested_to_used = float(requested // used)
    per_pod = requested // start_pods
    requests = [per_pod + d for d in (100, -100, 10, -10, 2, -2, 1, -1, 0, 0)]
    levels = [used // 10] * 10
    observed = util(levels, requests)

    target = abs(1 / (requested_to_used * (1 - 0.1))) + 0.01
    final_target = int(target * 100)
    used_ratio = used / (requested * target)
    final_pods = math.ceil(used_ratio * start_pods)
    assert (
        utilization_replicas(start_pods, start_pods, observed, final_target, DEFAULT_TOLERANCES)
        == final_pods
    )
    assert final_pods < start_pods  # the case is meant to breach the tolerance

    # Just inside the tolerance: no change.
    target = abs(1 / (requested_to_used * (1 - 0.1))) + 0.004
    final_target = int(target * 100)
    assert (
        utilization_replicas(start_pods, start_pods, observed, final_target, DEFAULT_TOLERANCES)
        == start_pods
    )


def test_utilization_truncates_to_a_whole_percent_like_hpa() -> None:
    # 55.9 % is 55 % to HPA: ratio 1.1 is inside the band, 1.118 would not be.
    assert utilization_replicas(10, 10, 55.9, 50, DEFAULT_TOLERANCES) == 10
    assert utilization_replicas(10, 10, 56.0, 50, DEFAULT_TOLERANCES) == 12


def test_utilization_without_ready_pods_is_an_error_like_hpa() -> None:
    # "did not receive metrics for targeted pods (pods might be unready)"
    assert utilization_replicas(3, 0, 80, 50, DEFAULT_TOLERANCES) is None


# --- object / external Value (getUsageRatioReplicaCount) ---------------------------------------

VALUE_CASES = [
    # name, current, ready, total (milli), target (milli), expected
    ("TestReplicaCalcScaleUpCMObject", 3, 3, 20000, 15000, 4),
    ("TestReplicaCalcScaleUpCMObjectIgnoresUnreadyPods", 3, 1, 50000, 10000, 5),
    ("TestReplicaCalcScaleUpCMExternal", 1, 1, 8600, 4400, 2),
    ("TestReplicaCalcScaleUpCMExternalIgnoresUnreadyPods", 3, 1, 8600, 4400, 2),
    ("TestReplicaCalcScaleUpCMExternalNoLabels", 1, 1, 8600, 4400, 2),
    ("TestReplicaCalcScaleDownCMObject", 5, 5, 12000, 20000, 3),
    ("TestReplicaCalcScaleDownCMExternal", 5, 5, 8600, 14334, 3),
    ("TestReplicaCalcToleranceCMObject", 3, 3, 20666, 20000, 3),
    ("TestReplicaCalcToleranceCMExternal", 3, 3, 8600, 8888, 3),
]


@pytest.mark.parametrize(
    ("name", "current", "ready", "total", "target", "expected"),
    VALUE_CASES,
    ids=[c[0] for c in VALUE_CASES],
)
def test_replica_calc_value(
    name: str, current: int, ready: int, total: float, target: float, expected: int
) -> None:
    assert usage_ratio_replicas(current, total / target, ready, DEFAULT_TOLERANCES) == expected


def test_value_at_zero_replicas_uses_the_ratio_alone_without_tolerance() -> None:
    assert usage_ratio_replicas(0, 1.05, 0, DEFAULT_TOLERANCES) == 2
    assert usage_ratio_replicas(0, 0.0, 0, DEFAULT_TOLERANCES) == 0


# --- object / external AverageValue (Get*PerPodMetricReplicas) ---------------------------------

PER_POD_CASES = [
    ("TestReplicaCalcScaleUpCMPerPodObject", 3, 20000, 5000, 4),
    ("TestReplicaCalcScaleUpPerPodCMExternal", 3, 8600, 2150, 4),
    ("TestReplicaCalcScaleDownPerPodCMObject", 5, 6000, 2000, 3),
    ("TestReplicaCalcScaleDownPerPodCMExternal", 5, 8600, 2867, 3),
    ("TestReplicaCalcTolerancePerPodCMObject", 4, 20166, 5000, 4),
    ("TestReplicaCalcTolerancePerPodCMExternal", 3, 8600, 2900, 3),
]


@pytest.mark.parametrize(
    ("name", "current", "total", "target", "expected"),
    PER_POD_CASES,
    ids=[c[0] for c in PER_POD_CASES],
)
def test_replica_calc_per_pod(
    name: str, current: int, total: float, target: float, expected: int
) -> None:
    assert per_pod_replicas(current, total, target, DEFAULT_TOLERANCES) == expected


def test_per_pod_at_zero_replicas() -> None:
    assert per_pod_replicas(0, 250.0, 100.0, DEFAULT_TOLERANCES) == 3
    assert per_pod_replicas(0, 0.0, 100.0, DEFAULT_TOLERANCES) == 0


# --- the HPA documentation's worked examples ---------------------------------------------------


def test_hpa_docs_200m_vs_100m_doubles() -> None:
    # "if the current metric value is 200m, and the desired value is 100m, the number of replicas
    # will be doubled, since 200.0 / 100.0 == 2.0"
    assert per_pod_replicas(1, 0.2, 0.1, DEFAULT_TOLERANCES) == 2
    assert per_pod_replicas(4, 4 * 0.2, 0.1, DEFAULT_TOLERANCES) == 8
    assert usage_ratio_replicas(4, 0.2 / 0.1, 4, DEFAULT_TOLERANCES) == 8


def test_hpa_docs_50m_vs_100m_halves() -> None:
    assert per_pod_replicas(4, 4 * 0.05, 0.1, DEFAULT_TOLERANCES) == 2
    assert utilization_replicas(4, 4, 50, 100, DEFAULT_TOLERANCES) == 2


def test_hpa_docs_tolerance_skips_ratios_close_to_one() -> None:
    for ratio in (0.9, 0.95, 1.0, 1.05, 1.1):
        assert usage_ratio_replicas(10, ratio, 10, DEFAULT_TOLERANCES) == 10
    assert usage_ratio_replicas(10, 1.11, 10, DEFAULT_TOLERANCES) == 12
    assert usage_ratio_replicas(10, 0.89, 10, DEFAULT_TOLERANCES) == 9


def test_split_tolerances_kep_4951() -> None:
    tol = Tolerances(down=0.15, up=0.05)
    assert usage_ratio_replicas(10, 1.06, 10, tol) == 11
    assert usage_ratio_replicas(10, 1.05, 10, tol) == 10
    assert usage_ratio_replicas(10, 0.86, 10, tol) == 10
    assert usage_ratio_replicas(10, 0.84, 10, tol) == 9


def test_raw_replicas_is_the_untolerated_formula() -> None:
    assert raw_replicas("AverageValue", 3, 3, 250.0, 100.0) == 3
    assert raw_replicas("Value", 4, 4, 105.0, 100.0) == 5  # ceil(1.05 × 4)
    assert raw_replicas("Utilization", 4, 2, 99.9, 50.0) == 4  # floor(99.9)/50 × 2
    assert raw_replicas("Value", 0, 0, 300.0, 100.0) == 3  # at least one pod, as Knative


def test_a_whole_percent_computed_in_floats_is_that_percent() -> None:
    # Found by tests/integration/test_hpa_diff.py: 14 ready pods use 1819 m of 14 × 100 m, 3
    # are pending. HPA: 181900 / 1700 = 107 % exactly → ceil(107/53 × 17) = 35. In floats,
    # 1819/14 × 14 / 17 lands just under 107 and truncated to 106 gave 34.
    assert utilization_replicas(17, 14, 1819 / 14, 53.0, DEFAULT_TOLERANCES) == 35
    assert whole_percent(0.29 * 100) == 29  # 28.999999999999996
    assert whole_percent(106.99) == 106
