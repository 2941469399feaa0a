"""The deliberate divergences from upstream HPA, one named rule each (docs/scalingpolicy.md).

A rule looks at a sync's inputs (and, for governor's own additions, at the reason governor
gives) — never at whether the two sides agree. The first sync a rule matches ends the
comparison of its case: the two sides' histories differ from there on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from governor.policy.behavior import resolve
from governor.policy.types import ScaleInputs, ScaleResult
from governor.spec import ScalingPolicySpec
from tests.hpa_diff.cases import CaseRecipe, MetricRecipe
from tests.hpa_diff.wire import Pod, Step


@dataclass(frozen=True, slots=True)
class Sync:
    """One sync as the rules see it."""

    case: CaseRecipe
    index: int
    step: Step
    policy: ScalingPolicySpec
    inputs: ScaleInputs
    result: ScaleResult
    previous_decision: int | None  # what the previous sync decided (None: first sync)
    # The scale events of the earlier syncs: (time, replicas added or, negative, removed).
    events: tuple[tuple[float, int], ...] = ()


def _pod_metrics(case: CaseRecipe) -> list[MetricRecipe]:
    return [m for m in case.policy.metrics if m.kind in ("cpu", "memory")]


def _active(pod: Pod) -> bool:
    return pod.phase != "Failed" and not pod.deleting


def behavior_omitted(s: Sync) -> bool:
    """The HPA has no `behavior`: the controller's legacy normalization caps a scale-up at
    max(2 × current, 4) with no rate period; governor applies the autoscaling/v2 defaults."""
    return s.case.policy.behavior == "omitted"


def external_change(s: Sync) -> bool:
    """The replicas changed since the last sync by something else than the autoscaler:
    governor counts that change in its rate-limit periods (scale.py), HPA does not."""
    return s.previous_decision is not None and s.step.spec_replicas != s.previous_decision


def missing_pods(s: Sync) -> bool:
    """A pod HPA groups as running has no sample of a resource metric: HPA re-counts it at
    100 % (scale-down) or 0 % (scale-up); governor sees the ready pods' average only."""
    for m in _pod_metrics(s.case):
        sampled = [m.kind in pod.metrics for pod in s.step.pods if _active(pod)]
        running = [pod.phase == "Running" for pod in s.step.pods if _active(pod)]
        # No pod with a sample at all is the metrics API failing: both sides see no metric.
        if any(sampled) and any(r and not h for r, h in zip(running, sampled, strict=True)):
            return True
    return False


def cpu_initialization(s: Sync) -> bool:
    """A Ready pod inside the CPU initialization period whose sample predates its readiness:
    HPA treats it as unready for cpu; governor has no per-pod start or transition times."""
    return any(m.kind == "cpu" for m in s.case.policy.metrics) and any(
        _active(pod) and pod.ready == "True" and pod.started_ago < 300 and pod.transition_ago < 30
        for pod in s.step.pods
    )


def non_cpu_readiness(s: Sync) -> bool:
    """A running pod that is not Ready reports memory: HPA counts it ready for non-cpu
    resources (groupPods checks readiness for cpu only); governor's ready count excludes it."""
    return any(m.kind == "memory" for m in s.case.policy.metrics) and any(
        _active(pod) and pod.phase == "Running" and pod.ready != "True" for pod in s.step.pods
    )


def terminating_ready(s: Sync) -> bool:
    """A terminating pod is still Running and Ready: HPA's ready-pod count for Value targets
    includes it; the Deployment's readyReplicas, which governor uses, does not."""
    return any(
        m.kind in ("external", "object") and m.target_type == "Value" for m in s.case.policy.metrics
    ) and any(pod.deleting and pod.ready == "True" for pod in s.step.pods)


def status_replicas(s: Sync) -> bool:
    """status.replicas ≠ spec.replicas (pods not created yet): HPA measures an AverageValue
    target against status.replicas, and counts as unready for cpu/memory only pods that exist;
    governor's WorkloadState carries spec and ready replicas only, so it uses spec, and counts
    spec − ready as unready."""
    return s.step.status_replicas != s.step.spec_replicas and any(
        m.target_type in ("AverageValue", "Utilization") for m in s.case.policy.metrics
    )


def value_direction(s: Sync) -> bool:
    """A Value target whose ratio says one way while ceil(ratio × ready pods) says the other
    (few pods ready): HPA follows the count; governor holds (scale.py, `readiness`)."""
    current = s.step.spec_replicas
    workload = s.inputs.workload
    if current == 0 or workload is None:
        return False
    tol = resolve(s.policy.behavior).tolerances
    for metric in s.policy.metrics:
        obs = s.inputs.observations[metric.name]
        if metric.target.type != "Value" or obs.stable is None:
            continue
        ratio = obs.stable / metric.target.target_value()
        if tol.within(ratio):
            continue
        desired = math.ceil(ratio * workload.ready_replicas)
        if (ratio > 1 and desired < current) or (ratio < 1 and desired > current):
            return True
    return False


def forgotten_event(s: Sync) -> bool:
    """HPA keeps scale-up and scale-down events apart and, storing a new one, overwrites an
    event of the same direction that is older than that direction's longest policy period
    (storeScaleEvent), though the other direction's longer period still counts it; governor
    keeps every event within the longest period of either direction."""
    behavior = resolve(s.policy.behavior)
    longest = {True: behavior.up.longest_period, False: behavior.down.longest_period}
    now = s.step.at / 1000.0
    for i, (at, change) in enumerate(s.events):
        own, other = longest[change > 0], longest[change < 0]
        if other <= own or now - at >= other:
            continue
        if any((c > 0) == (change > 0) and t - at > own for t, c in s.events[i + 1 :]):
            return True
    return False


def panic(s: Sync) -> bool:
    """governor's panic mode (Knative) bound the decision: HPA has no panic window."""
    return any(r.rule == "panic" for r in s.result.reasons)


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    applies: Callable[[Sync], bool]


RULES: tuple[Rule, ...] = tuple(
    Rule(f.__name__, f)
    for f in (
        behavior_omitted,
        external_change,
        missing_pods,
        cpu_initialization,
        non_cpu_readiness,
        terminating_ready,
        status_replicas,
        value_direction,
        forgotten_event,
        panic,
    )
)


def excluded_by(s: Sync) -> str | None:
    """The first rule that excludes this sync, or None: then the two sides must agree."""
    for rule in RULES:
        if rule.applies(s):
            return rule.name
    return None
