"""Random HPA cases, and what each side of the comparison sees of them.

A case is a policy and a few syncs. Hypothesis draws *recipes*: everything about a sync except
the replicas it starts from, which is what the previous sync decided (the controller applied
it), so each sync is materialized only once the harness has answered the one before. From one
materialized sync, the upstream side gets pods (per-pod metrics, phases, Ready conditions,
start and transition times) and the governor side gets what its pipeline carries, through the
one mapping `governor_inputs`.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from hypothesis import strategies as st

from governor.events import WorkloadState
from governor.policy.types import MetricObservation, ScaleInputs
from governor.spec import (
    Behavior,
    HPAScalingPolicy,
    HPAScalingRules,
    MetricSpec,
    MetricTarget,
    PanicSpec,
    PushSource,
    ResourceSource,
    ScalingPolicySpec,
    TargetRef,
    TargetType,
    hpa_compatible,
)
from tests.hpa_diff.wire import Pod, PodMetric, Setup, Step

MetricKind = Literal["cpu", "memory", "external", "object"]
BehaviorMode = Literal["set", "empty", "omitted"]
PodState = Literal["ready", "pending", "starting", "missing", "recovering", "failed", "terminating"]
WORKLOAD = "ns/Deployment/target"
EPOCH_MS = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class MetricRecipe:
    kind: MetricKind
    target_type: TargetType
    target: int  # Utilization: percent of request; Value, AverageValue: milli-units

    def name(self, i: int) -> str:
        return self.kind if self.kind in ("cpu", "memory") else f"{self.kind}-{i}"


@dataclass(frozen=True, slots=True)
class RulesRecipe:
    """One direction of `behavior` (HPAScalingRules); None fields are left to the defaults."""

    window: int | None
    select: Literal["Max", "Min", "Disabled"] | None
    policies: tuple[tuple[Literal["Pods", "Percent"], int, int], ...] | None
    tolerance_milli: int | None


@dataclass(frozen=True, slots=True)
class PolicyRecipe:
    min_replicas: int
    max_replicas: int
    metrics: tuple[MetricRecipe, ...]
    # set: both sides get scale_up/scale_down; empty: governor omits behavior, HPA gets
    # `behavior: {}` (defaulted to the v2 rules); omitted: HPA gets no behavior at all.
    behavior: BehaviorMode
    scale_up: RulesRecipe | None
    scale_down: RulesRecipe | None
    panic: bool
    cpu_request: int  # millicores per pod
    memory_request: int  # milli-bytes per pod


@dataclass(frozen=True, slots=True)
class PodsRecipe:
    """How many pods are in each non-ready state; the rest of the spec replicas are ready."""

    pending: int = 0
    starting: int = 0
    missing: int = 0
    recovering: int = 0
    failed: int = 0
    terminating: int = 0
    not_created: int = 0


@dataclass(frozen=True, slots=True)
class StepRecipe:
    gap: int  # seconds since the previous sync
    levels: tuple[int, ...]  # per metric: the load in percent of its target
    offsets: tuple[int, ...]  # per metric: milli-units added, to land on and beside boundaries
    errors: tuple[bool, ...]  # per metric: the metrics API fails
    spread: int  # per-pod spread of usage, percent
    seed: int
    pods: PodsRecipe
    external_replicas: int | None  # something else set the replicas since the last sync
    panic_level: int  # the panic window's value, percent of the stable one


@dataclass(frozen=True, slots=True)
class CaseRecipe:
    policy: PolicyRecipe
    initial_replicas: int
    steps: tuple[StepRecipe, ...]


# --- strategies -------------------------------------------------------------------------------
#
# Hypothesis draws each policy (where its boundaries matter: targets, tolerances, windows, rate
# policies, bounds) and a seed; the seed expands into CASES_PER_POLICY cases of that policy, each
# a few syncs drawn with the weights below. One hypothesis draw costs about what one whole
# evaluation does, so drawing every pod count of every sync would make 10,000 cases take
# minutes instead of seconds.

CASES_PER_POLICY = 10
_batches = itertools.count()

_metric = st.one_of(
    st.builds(
        MetricRecipe,
        st.sampled_from(["cpu", "memory"]),
        st.just("Utilization"),
        st.sampled_from([50, 60, 70, 75, 80, 90, 100, 150]) | st.integers(1, 200),
    ),
    st.builds(
        MetricRecipe,
        st.sampled_from(["external", "object"]),
        st.sampled_from(["Value", "AverageValue"]),
        st.sampled_from([1000, 10_000, 100_000, 500]) | st.integers(1, 5_000_000),
    ),
)

_rules = st.builds(
    RulesRecipe,
    st.none() | st.sampled_from([0, 15, 30, 60, 120, 300]) | st.integers(0, 900),
    st.none() | st.sampled_from(["Max", "Min", "Disabled"]),
    st.none()
    | st.lists(
        st.tuples(
            st.sampled_from(["Pods", "Percent"]),
            st.sampled_from([1, 2, 4, 10, 50, 100, 200]) | st.integers(1, 300),
            st.sampled_from([15, 30, 60, 120]) | st.integers(1, 600),
        ),
        min_size=1,
        max_size=3,
    ).map(tuple),
    st.none() | st.sampled_from([0, 50, 100, 200]) | st.integers(0, 500),
)


@st.composite
def _policy(draw: st.DrawFn) -> PolicyRecipe:
    lo = draw(st.integers(1, 5))
    metrics = draw(st.lists(_metric, min_size=1, max_size=3, unique_by=lambda m: m.kind))
    mode: BehaviorMode = draw(st.sampled_from(["set", "set", "empty"]))
    return PolicyRecipe(
        min_replicas=lo,
        # Room above the load most syncs ask for, so fewer of them end at maxReplicas.
        max_replicas=draw(st.integers(lo, 40) | st.integers(max(lo, 15), 60)),
        metrics=tuple(metrics),
        behavior=mode,
        scale_up=draw(st.none() | _rules) if mode == "set" else None,
        scale_down=draw(st.none() | _rules) if mode == "set" else None,
        panic=False,
        cpu_request=draw(st.sampled_from([100, 250, 500, 1000]) | st.integers(1, 4000)),
        memory_request=draw(st.sampled_from([2**28, 2**30]).map(lambda b: b * 1000)),
    )


_BOUNDARY_LEVELS = (0, 50, 89, 90, 91, 95, 100, 105, 109, 110, 111, 150, 200, 300)


def _level(rng: random.Random) -> int:
    pick = rng.randrange(3)
    if pick == 0:
        return rng.choice(_BOUNDARY_LEVELS)
    return rng.randint(80, 120) if pick == 1 else rng.randint(0, 500)


def _rare(rng: random.Random, one_in: int, most: int) -> int:
    """0, except once in `one_in` syncs: 1..most."""
    return rng.randint(1, most) if rng.randrange(one_in) == 0 else 0


def _step(rng: random.Random, policy: PolicyRecipe) -> StepRecipe:
    n = len(policy.metrics)
    memory = any(m.kind == "memory" for m in policy.metrics)
    # Few ready pods under a Value target is where governor holds and HPA does not (a named
    # divergence): unready pods are rarer there so the other syncs of those cases count.
    value = any(m.target_type == "Value" for m in policy.metrics)
    return StepRecipe(
        gap=rng.choice((15, 15, 15, 30, 45, 60, 300, 315))
        if rng.randrange(2)
        else rng.randint(15, 700),
        levels=tuple(_level(rng) for _ in range(n)),
        offsets=tuple(rng.choice((0, 0, 0, -1, 1)) for _ in range(n)),
        errors=tuple(rng.randrange(40) == 0 for _ in range(n)),
        spread=rng.choice((0, 0, 5, 20, 50)),
        seed=rng.randrange(2**16),
        pods=PodsRecipe(
            pending=_rare(rng, 12 if value else 5, 3),
            # A running pod that is not Ready reports memory: a named divergence; keep it rare.
            starting=_rare(rng, 150 if memory else 12 if value else 4, 2),
            missing=_rare(rng, 200, 2),
            recovering=_rare(rng, 200, 1),
            failed=_rare(rng, 10, 2),
            terminating=_rare(rng, 300 if value else 100, 2),
            not_created=_rare(rng, 150, 2),
        ),
        external_replicas=rng.choice((1, 3, 8)) if rng.randrange(400) == 0 else None,
        panic_level=rng.choice((100, 150, 300)),
    )


def _case(rng: random.Random, policy: PolicyRecipe) -> CaseRecipe:
    # Rare variants of the drawn policy, each a named divergence: an HPA without behavior (a
    # legacy path governor does not follow), and governor's own panic mode.
    pick = rng.randrange(100)
    if pick == 0:
        policy = dataclasses.replace(policy, behavior="omitted", scale_up=None, scale_down=None)
    elif pick == 1:
        policy = dataclasses.replace(policy, panic=True)
    hi = policy.max_replicas
    initial = rng.randint(1, hi) if rng.randrange(4) else rng.randint(0, hi + 3)
    steps = tuple(_step(rng, policy) for _ in range(rng.randint(1, 5)))
    return CaseRecipe(policy, initial, steps)


@st.composite
def case_batches(draw: st.DrawFn) -> list[CaseRecipe]:
    """CASES_PER_POLICY cases of one drawn policy."""
    # The batch number joins the drawn seed: hypothesis mutates earlier examples and keeps
    # their seed, which would repeat whole batches of syncs. The order of the draws is fixed
    # (derandomized, or a given seed), so a run is still reproducible.
    policy = draw(_policy())
    rng = random.Random(f"{draw(st.integers(0, 2**64 - 1))}/{next(_batches)}")
    return [_case(rng, policy) for _ in range(CASES_PER_POLICY)]


# --- the policy, as each side states it -------------------------------------------------------


def _governor_rules(r: RulesRecipe | None) -> HPAScalingRules | None:
    if r is None:
        return None
    return HPAScalingRules(
        stabilization_window_seconds=r.window,
        select_policy=r.select,
        policies=None
        if r.policies is None
        else [HPAScalingPolicy(type=t, value=v, period_seconds=p) for t, v, p in r.policies],
        tolerance=None if r.tolerance_milli is None else f"{r.tolerance_milli}m",
    )


def _target(m: MetricRecipe) -> MetricTarget:
    if m.target_type == "Utilization":
        return MetricTarget(type="Utilization", average_utilization=float(m.target))
    if m.target_type == "Value":
        return MetricTarget(type="Value", value=float(m.target))
    return MetricTarget(type="AverageValue", average_value=float(m.target))


def governor_policy(p: PolicyRecipe) -> ScalingPolicySpec:
    """The ScalingPolicy a user would write for this HPA, in its HPA-compatible mode."""
    behavior = None
    if p.behavior == "set" and (p.scale_up is not None or p.scale_down is not None):
        behavior = Behavior(
            scale_up=_governor_rules(p.scale_up), scale_down=_governor_rules(p.scale_down)
        )
    metrics = [
        MetricSpec(
            name=m.name(i),
            target=_target(m),
            source=ResourceSource(resource=m.kind) if m.kind in ("cpu", "memory") else PushSource(),
        )
        for i, m in enumerate(p.metrics)
    ]
    return hpa_compatible(
        ScalingPolicySpec(
            target_ref=TargetRef(kind="Deployment", name="target"),
            min_replicas=p.min_replicas,
            max_replicas=p.max_replicas,
            metrics=metrics,
            behavior=behavior,
            panic=PanicSpec() if p.panic else None,
        )
    )


def _hpa_rules(r: RulesRecipe | None) -> dict[str, Any] | None:
    if r is None:
        return None
    out: dict[str, Any] = {}
    if r.window is not None:
        out["stabilizationWindowSeconds"] = r.window
    if r.select is not None:
        out["selectPolicy"] = r.select
    if r.policies is not None:
        out["policies"] = [{"type": t, "value": v, "periodSeconds": s} for t, v, s in r.policies]
    if r.tolerance_milli is not None:
        out["tolerance"] = f"{r.tolerance_milli}m"
    return out


def _hpa_target(m: MetricRecipe) -> dict[str, Any]:
    if m.target_type == "Utilization":
        return {"type": "Utilization", "averageUtilization": m.target}
    key = "value" if m.target_type == "Value" else "averageValue"
    return {"type": m.target_type, key: f"{m.target}m"}


def _hpa_metric(m: MetricRecipe, name: str) -> dict[str, Any]:
    if m.kind in ("cpu", "memory"):
        return {"type": "Resource", "resource": {"name": m.kind, "target": _hpa_target(m)}}
    if m.kind == "external":
        return {
            "type": "External",
            "external": {"metric": {"name": name}, "target": _hpa_target(m)},
        }
    return {
        "type": "Object",
        "object": {
            "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "svc"},
            "metric": {"name": name},
            "target": _hpa_target(m),
        },
    }


def hpa_setup(p: PolicyRecipe) -> Setup:
    spec: dict[str, Any] = {
        "minReplicas": p.min_replicas,
        "maxReplicas": p.max_replicas,
        "metrics": [_hpa_metric(m, m.name(i)) for i, m in enumerate(p.metrics)],
    }
    if p.behavior == "set":
        behavior = {}
        for key, rules in (("scaleUp", p.scale_up), ("scaleDown", p.scale_down)):
            hpa_rules = _hpa_rules(rules)
            if hpa_rules is not None:
                behavior[key] = hpa_rules
        spec["behavior"] = behavior
    elif p.behavior == "empty":
        spec["behavior"] = {}
    return Setup(hpa=spec)


# --- one sync, materialized -------------------------------------------------------------------

# Per state: phase, Ready condition, seconds since start, since the Ready transition, deleting
# (wire.Pod's fields after its name, in its order: `materialize` passes them as they stand).
_POD_STATES: dict[
    PodState, tuple[Literal["Running", "Pending", "Failed"], str, float, float, bool]
] = {
    "ready": ("Running", "True", 600.0, 540.0, False),
    "pending": ("Pending", "", -1.0, 0.0, False),
    # Started 20 s ago, not Ready yet (inside the CPU initialization period and readiness delay).
    "starting": ("Running", "False", 20.0, 20.0, False),
    "missing": ("Running", "True", 600.0, 540.0, False),  # Ready, but no metric sample
    # Ready 10 s ago inside the CPU initialization period: its sample predates readiness + window.
    "recovering": ("Running", "True", 100.0, 10.0, False),
    "failed": ("Failed", "False", 600.0, 500.0, False),
    "terminating": ("Running", "True", 600.0, 540.0, True),
}
_NO_SAMPLE: frozenset[PodState] = frozenset({"pending", "missing", "failed"})


def _pod_states(pods: PodsRecipe, spec: int) -> list[PodState]:
    """The target's pods: `spec − not_created` active ones, plus failed and terminating ones."""
    active = max(0, spec - pods.not_created)
    counts: tuple[tuple[PodState, int], ...] = (
        ("pending", pods.pending),
        ("starting", pods.starting),
        ("missing", pods.missing),
        ("recovering", pods.recovering),
    )
    special: list[PodState] = [state for state, n in counts for _ in range(n)][:active]
    states: list[PodState] = special + ["ready"] * (active - len(special))
    return states + ["failed"] * pods.failed + ["terminating"] * pods.terminating


def _jitter(seed: int, i: int, amplitude: int) -> int:
    if amplitude <= 0:
        return 0
    return (seed * 2654435761 + (i + 1) * 40503) % (2 * amplitude + 1) - amplitude


def materialize(case: CaseRecipe, index: int, spec: int, at_ms: int) -> Step:
    """Sync `index` of `case`, starting from `spec` replicas, at `at_ms`."""
    p, s = case.policy, case.steps[index]
    states = _pod_states(s.pods, spec)
    requests = {"cpu": p.cpu_request, "memory": p.memory_request}
    pods: list[Pod] = []
    for i, state in enumerate(states):
        samples: dict[str, PodMetric] = {}
        if state not in _NO_SAMPLE:
            for m, level, offset in zip(p.metrics, s.levels, s.offsets, strict=True):
                if m.kind in ("cpu", "memory"):
                    base = requests[m.kind] * m.target * level // 10_000
                    value = base + _jitter(s.seed, i, base * s.spread // 100)
                    samples[m.kind] = PodMetric(value=max(0, value + (offset if i == 0 else 0)))
        pods.append(Pod(f"pod-{i}", *_POD_STATES[state], requests=requests, metrics=samples))
    external: dict[str, int | None] = {}
    objects: dict[str, int | None] = {}
    for i, (m, level, offset, error) in enumerate(
        zip(p.metrics, s.levels, s.offsets, s.errors, strict=True)
    ):
        if m.kind in ("cpu", "memory"):
            continue
        per = max(1, spec) if m.target_type == "AverageValue" else 1
        reading = None if error else max(0, m.target * level // 100 * per + offset)
        (external if m.kind == "external" else objects)[m.name(i)] = reading
    if any(s.errors[i] for i, m in enumerate(p.metrics) if m.kind in ("cpu", "memory")):
        # The resource metrics API fails: no pod has a sample of that resource.
        failing = {m.kind for i, m in enumerate(p.metrics) if s.errors[i]}
        pods = [
            msgspec.structs.replace(
                pod, metrics={k: v for k, v in pod.metrics.items() if k not in failing}
            )
            for pod in pods
        ]
    status = sum(1 for state in states if state not in ("failed", "terminating"))
    return Step(
        at=at_ms,
        spec_replicas=spec,
        status_replicas=status,
        pods=pods,
        external=external,
        object=objects,
    )


def _governor_ready(pod: Pod) -> bool:
    """What a Deployment's status.readyReplicas counts: active pods whose Ready is True."""
    return pod.phase == "Running" and pod.ready == "True" and not pod.deleting


def governor_inputs(case: CaseRecipe, index: int, step: Step) -> ScaleInputs:
    """THE mapping from a per-pod sync to what governor's pipeline hands `evaluate`.

    - WorkloadState: spec replicas, and ready replicas as the Deployment's status counts them
      (Running, Ready=True, not terminating);
    - a resource Utilization metric: Σ usage × 100 / Σ requests over those ready pods that have
      a sample (the ready pods' average, every pod with the same requests), none when no ready
      pod has one;
    - an External/Object metric: its value (a total), none when the metrics API fails;
    - the panic window (policies with `panic` only): the stable value × the sync's panic level.
    Units are the harness's milli-units on both sides, so no conversion can round.
    """
    p, s = case.policy, case.steps[index]
    now = step.at / 1000.0
    ready_pods = [pod for pod in step.pods if _governor_ready(pod)]
    observations: dict[str, MetricObservation] = {}
    for i, m in enumerate(p.metrics):
        name = m.name(i)
        value: float | None
        if m.kind in ("cpu", "memory"):
            used = [pod for pod in ready_pods if m.kind in pod.metrics]
            total_request = sum(pod.requests[m.kind] for pod in used)
            value = (
                sum(pod.metrics[m.kind].value for pod in used) * 100 / total_request
                if used and total_request
                else None
            )
        else:
            raw = (step.external if m.kind == "external" else step.object)[name]
            value = None if raw is None else float(raw)
        panic = None if value is None or not p.panic else value * s.panic_level / 100
        observations[name] = MetricObservation(
            metric=name,
            stable=value,
            panic=panic,
            newest_sample=None if value is None else now,
        )
    workload = WorkloadState(
        workload=WORKLOAD,
        spec_replicas=step.spec_replicas,
        ready_replicas=len(ready_pods),
        observed_at=now,
    )
    return ScaleInputs(workload=workload, observations=observations)
