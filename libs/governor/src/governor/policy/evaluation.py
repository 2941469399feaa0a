"""What `evaluate` (scale.py) derives from a policy alone, memoized, and one evaluation in
progress: the values every step of scale.py and headroom.py reads and adds to."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import msgspec

from governor.events import MetricInput, Reason, Rule
from governor.policy.behavior import ResolvedBehavior, resolve
from governor.policy.replicas import (
    Tolerances,
    per_pod_replicas,
    usage_ratio_replicas,
    utilization_replicas,
    whole_percent,
)
from governor.policy.staleness import stale_after
from governor.spec import (
    EventReductionSpec,
    ForecastSpec,
    MetricSpec,
    ResourceSource,
    ScaleToZeroSpec,
    ScalingPolicySpec,
)


def g4(x: float) -> str:
    """`f"{x:.4g}"`, the same text. Compiled, an f-string with a format spec is one
    `'{:{}}'.format(value, spec)` call per placeholder (its other placeholders too), and reasons
    are worded on every evaluation; printf-style formatting reaches the same float formatter
    directly, and an f-string without specs is joined natively."""
    return "%.4g" % x  # noqa: UP031 (the point: see above)


def target_of(metric: MetricSpec) -> float:
    t = metric.target
    kind = t.type
    value = (
        t.average_utilization
        if kind == "Utilization"
        else t.value
        if kind == "Value"
        else t.average_value
    )
    assert value is not None  # MetricSpec.__post_init__ guarantees it
    return value


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    kind: str
    target: float
    stale_after: float
    # KEDA has no fallback for cpu/memory: a failing resource metric only ever holds.
    fallback_ok: bool
    # Preformatted for the reasons (float formatting is a visible share of an evaluation).
    vs_target: str


@dataclass(frozen=True, slots=True)
class ForecastConsts:
    """What the forecast step derives from the policy, the start-up and the step alone."""

    horizon: float
    steps: int  # the horizon in decision steps
    up_q: float
    down_q: float
    half_life: float
    level_half_life: float
    peak: float  # peakPercent as a fraction
    growth: float  # 2 ** (step / half_life): a growth sample's weight, one step later
    unit: float  # a replica unit in the metric's own (its target), for the reasons
    floor_text: str  # the forecast reason's text before the bound: "forecast: p90 of load …"
    floor_note: str  # and after it (peakPercent, when not 100)


@dataclass(frozen=True, slots=True)
class Compiled:
    """What evaluate derives from a policy alone: resolved behavior, bounds, metric constants."""

    behavior: ResolvedBehavior
    tol: Tolerances
    # tol's band as bounds (Tolerances.within's floats): compared inline on every evaluation
    tol_lo: float
    tol_hi: float
    metrics: tuple[Metric, ...]
    up_window: str
    down_window: str
    band: str  # the tolerance band, preformatted for the reasons: "[0.9, 1.1]"
    zero: ScaleToZeroSpec | None  # scale-to-zero, when minReplicas is 0
    lo: int  # minReplicas, or 1 with scale-to-zero (0 is the zero step's)
    hi: int  # maxReplicas or the lower replicaCap, never under lo
    cap_binds: bool  # hi is the replicaCap
    forecast: ForecastSpec | None  # when enabled
    reduce: EventReductionSpec | None  # when enabled
    # The forecast step's constants per (learned start-up, decision step): headroom.py fills
    # it. The start-up changes rarely, so deriving them once per value, not per evaluation.
    forecast_consts: dict[tuple[float | None, float], ForecastConsts]


_CACHE: Final[dict[int, tuple[ScalingPolicySpec, Compiled]]] = {}
# Above the number of live policies (one per workload, plus capped variants): a first-in
# first-out cache smaller than the working set misses on every evaluation (at 10,000 workloads
# and 4,096 entries, compiling was a fifth of the decider's CPU). A stale entry holds only its
# old spec object; the bound keeps that memory finite.
_CACHE_MAX: Final = 131_072
_BY_CONTENT: Final[dict[bytes, Compiled]] = {}
_ENCODE: Final = msgspec.msgpack.Encoder().encode


def compile_policy(policy: ScalingPolicySpec) -> Compiled:
    """Memoized by identity: a policy is a value (a new version is a new object), and the cache
    holds a reference, so an id cannot be reused while its entry lives. A new object with the
    content of one compiled before (many workloads templated from one spec, each decoded on its
    own) shares that compilation: the key is the encoding of every field but the target, which
    each workload's policy names for itself and compiling never reads (tests/unit trip if it
    does), so no field a compilation reads can be left out of it."""
    hit = _CACHE.get(id(policy))
    if hit is not None and hit[0] is policy:
        return hit[1]
    fields = msgspec.structs.asdict(policy)  # shallow: no copy of the nested specs
    del fields["target_ref"]
    content = _ENCODE(fields)
    compiled = _BY_CONTENT.get(content)
    if compiled is None:
        compiled = _compile(policy)
        if len(_BY_CONTENT) >= _CACHE_MAX:
            del _BY_CONTENT[next(iter(_BY_CONTENT))]
        _BY_CONTENT[content] = compiled
    if len(_CACHE) >= _CACHE_MAX:
        del _CACHE[next(iter(_CACHE))]
    _CACHE[id(policy)] = (policy, compiled)
    return compiled


def _compile(policy: ScalingPolicySpec) -> Compiled:
    behavior = resolve(policy.behavior)
    zero = policy.scale_to_zero if policy.min_replicas == 0 else None
    hi = policy.max_replicas
    cap_binds = False
    if policy.replica_cap is not None and policy.replica_cap < hi:
        hi, cap_binds = policy.replica_cap, True
    lo = policy.min_replicas if zero is None else 1
    if hi < lo:
        hi, cap_binds = lo, False
    compiled = Compiled(
        behavior=behavior,
        tol=behavior.tolerances,
        tol_lo=1.0 - behavior.tolerances.down,
        tol_hi=1.0 + behavior.tolerances.up,
        zero=zero,
        lo=lo,
        hi=hi,
        cap_binds=cap_binds,
        forecast=policy.forecast if policy.forecast and policy.forecast.enabled else None,
        reduce=(
            policy.event_reduction
            if policy.event_reduction and policy.event_reduction.enabled
            else None
        ),
        forecast_consts={},
        band=f"[{1 - behavior.tolerances.down:.4g}, {1 + behavior.tolerances.up:.4g}]",
        up_window=f"stabilization window {behavior.up.window:.4g} s",
        down_window=f"stabilization window {behavior.down.window:.4g} s",
        metrics=tuple(
            Metric(
                m.name,
                m.target.type,
                target_of(m),
                stale_after(policy, m),
                not isinstance(m.source, ResourceSource),
                f" vs target {target_of(m):.4g}",
            )
            for m in policy.metrics
        ),
    )
    return compiled


def ratio(kind: str, value: float, target: float, current: int) -> float:
    if kind == "Utilization":
        return whole_percent(value) / target
    if kind == "Value":
        return value / target
    return value / (target * current) if current else math.inf


def metric_desired(
    kind: str, current: int, ready: int, value: float, target: float, tol: Tolerances
) -> int | None:
    if kind == "Utilization":
        return utilization_replicas(current, ready, value, target, tol)
    if kind == "Value":
        return usage_ratio_replicas(current, value / target, ready, tol)
    return per_pod_replicas(current, value, target, tol)


class Evaluation:
    """One evaluation in progress: what every step reads (the policy, the target, now) and
    what the metric steps found together. A plain class in a compiled module, so mypyc makes it
    a native one: its fields are read and written as C struct members, where a msgspec Struct's
    went through Python's generic attribute lookup from compiled code (a fifth of an
    evaluation's instructions under callgrind: docs/simulation.md, "The compiled hot path")."""

    policy: ScalingPolicySpec
    c: Compiled
    current: int
    ready: int
    now: float
    reasons: list[Reason]  # every step that changes the count adds its Reason here
    inputs: list[MetricInput]
    best: int  # the largest count a metric (or the fallback) asks for
    best_rule: Rule
    invalid: int
    failing: list[Metric] | None  # allocated only when a metric fails
    failing_age: float
    panic_desired: int | None
    panic_metric: str | None
    active: bool
    newest: float
    all_within: bool
    # Forecast on: each fresh metric's load in replica units (what it asks at exactly its target).
    loads: list[tuple[str, float]] | None
    floor: int  # the forecast's floor (upper bound at the forecast quantile)
    floor_load: float  # that bound in replica units
    gate: int  # the count a scale-down must not go under (event reduction)
    burst: bool  # the gate is the remembered burst level (the load collapsed from it)
    horizon: float
    consts: ForecastConsts | None  # the forecast step's, once it ran
    # Event reduction on: the largest count a metric asks for without the tolerance band.
    untolerated: int
    # A small scale-down held (merged) since: as of the last evaluation, and after this one.
    merged_since: float | None
    merge_since: float | None

    def __init__(
        self,
        policy: ScalingPolicySpec,
        c: Compiled,
        current: int,
        ready: int,
        now: float,
        merged_since: float | None,
    ) -> None:
        self.policy, self.c, self.current, self.ready, self.now = policy, c, current, ready, now
        self.reasons, self.inputs = [], []
        self.best, self.best_rule, self.invalid = -1, "metric", 0
        self.failing, self.failing_age = None, 0.0
        self.panic_desired, self.panic_metric = None, None
        self.active, self.newest, self.all_within = False, 0.0, True
        self.loads, self.floor, self.floor_load = None, -1, 0.0
        self.gate, self.burst, self.horizon, self.consts = -1, False, 0.0, None
        self.untolerated = -1
        self.merged_since, self.merge_since = merged_since, None
