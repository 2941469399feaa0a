"""HPA parity for `behavior`: ports of kubernetes horizontal_test.go and autoscaling/v2 defaults.

Upstream uses time.Now(); here `now` is fixed and events/recommendations are placed relative to it.
HPA keeps a scale-up and a scale-down event list with positive magnitudes; governor keeps one
signed list, so a scale-down event of 5 is (t, -5).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.policy.behavior import (
    DEFAULT_BEHAVIOR,
    RatePolicy,
    Rules,
    limit_rate,
    record,
    record_event,
    record_sampled,
    replicas_change,
    resolve,
    scale_down_limit,
    scale_up_limit,
    split_history,
    stabilize,
)
from governor.spec import Behavior

NOW = 10_000.0
Pairs = tuple[tuple[float, int], ...]
BIG = 10**9


def pairs(history: tuple[tuple[float, ...], tuple[int, ...]]) -> Pairs:
    """The flat history (times, replicas) as (time, replicas) pairs, to compare against."""
    return tuple(zip(*history, strict=True))


def stabilized(
    history: Sequence[tuple[float, int]],
    current: int,
    desired: int,
    now: float,
    up_window: float,
    down_window: float,
) -> tuple[int, int, int]:
    """`stabilize` over pairs: the count, and the up- and down-window limits (the count for a
    current far below and far above: the limits always bracket `desired`)."""
    times, replicas = split_history(history)
    args = (desired, now, up_window, down_window)
    return (
        stabilize(times, replicas, current, *args),
        stabilize(times, replicas, -BIG, *args),
        stabilize(times, replicas, BIG, *args),
    )


def recorded(history: Sequence[tuple[float, int]], desired: int, now: float, *rest: float) -> Pairs:
    step, horizon = rest
    return pairs(record(split_history(history), desired, now, step, horizon))


def sampled(
    history: Sequence[tuple[float, int]], desired: int, now: float, *rest: float, changed: bool
) -> Pairs:
    step, horizon = rest
    return pairs(
        record_sampled(split_history(history), desired, now, step, horizon, changed=changed)
    )


def behavior(up: dict[str, Any] | None = None, down: dict[str, Any] | None = None) -> Behavior:
    obj: dict[str, Any] = {}
    if up is not None:
        obj["scaleUp"] = up
    if down is not None:
        obj["scaleDown"] = down
    return msgspec.convert(obj, Behavior)


def generate_scaling_rules(
    pods: int, pods_period: int, percent: int, percent_period: int, window: int
) -> dict[str, Any]:
    """horizontal_test.go generateScalingRules: selectPolicy Max, the non-zero policies."""
    policies = []
    if pods:
        policies.append({"type": "Pods", "value": pods, "periodSeconds": pods_period})
    if percent:
        policies.append({"type": "Percent", "value": percent, "periodSeconds": percent_period})
    out: dict[str, Any] = {"stabilizationWindowSeconds": window, "selectPolicy": "Max"}
    if policies:
        out["policies"] = policies
    return out


def one_policy(kind: str, value: int, period: int, **rest: Any) -> dict[str, Any]:
    """Rules with the one policy `kind`/`value`/`period` and the other fields in `rest`."""
    return {"policies": [{"type": kind, "value": value, "periodSeconds": period}], **rest}


def generate_events_uniform_distribution(raw: list[int], period: int) -> list[tuple[float, int]]:
    """Events spread over the last `period` seconds, each in the middle of its segment."""
    segment = period / len(raw)
    return [
        (NOW - (period - segment * (i + 1) + segment / 2), change) for i, change in enumerate(raw)
    ]


# --- pkg/apis/autoscaling/v2 defaults_test.go --------------------------------------------------


# (annotation, rules, policies, window, select) per direction, as upstream's two tables.
RulesCase = tuple[str, dict[str, Any] | None, list[tuple[str, int, int]], float, str]
# The same in both directions.
ALL_SPECIFIED: RulesCase = (
    "All parameters are specified",
    generate_scaling_rules(1, 2, 3, 4, 25),
    [("Pods", 1, 2), ("Percent", 3, 4)],
    25.0,
    "Max",
)
SCALE_DOWN_RULES: list[RulesCase] = [
    ("Default values", None, [("Percent", 100, 15)], 300.0, "Max"),
    ALL_SPECIFIED,
    (
        "Percent policy is specified",
        one_policy("Percent", 1, 2, selectPolicy="Min"),
        [("Percent", 1, 2)],
        300.0,
        "Min",
    ),
    (
        "Pods policy is specified",
        one_policy("Pods", 3, 4),
        [("Pods", 3, 4)],
        300.0,
        "Max",
    ),
]
SCALE_UP_RULES: list[RulesCase] = [
    ("Default values", None, [("Pods", 4, 15), ("Percent", 100, 15)], 0.0, "Max"),
    ALL_SPECIFIED,
    (
        "Pod policy is specified",
        one_policy("Pods", 1, 2, selectPolicy="Min"),
        [("Pods", 1, 2)],
        0.0,
        "Min",
    ),
    (
        "Percent policy is specified",
        one_policy("Percent", 7, 10),
        [("Percent", 7, 10)],
        0.0,
        "Max",
    ),
    (
        "Pod policy and stabilization window are specified",
        one_policy("Pods", 4, 2, stabilizationWindowSeconds=25),
        [("Pods", 4, 2)],
        25.0,
        "Max",
    ),
    (
        "Percent policy and stabilization window are specified",
        one_policy("Percent", 7, 60, stabilizationWindowSeconds=25),
        [("Percent", 7, 60)],
        25.0,
        "Max",
    ),
]


@pytest.mark.parametrize(
    ("direction", "annotation", "rules", "policies", "window", "select"),
    [("down", *case) for case in SCALE_DOWN_RULES] + [("up", *case) for case in SCALE_UP_RULES],
)
def test_TestGenerateScaleDownRules_and_TestGenerateScaleUpRules(
    direction: str,
    annotation: str,
    rules: dict[str, Any] | None,
    policies: list[tuple[str, int, int]],
    window: float,
    select: str,
) -> None:
    # Upstream leaves the down window nil and the controller fills its 300 s flag default.
    resolved = resolve(behavior(**{direction: rules}) if rules else None)
    got = resolved.up if direction == "up" else resolved.down
    assert [(p.type, p.value, p.period_seconds) for p in got.policies] == policies
    assert got.window == window
    assert got.select == select


def test_resolve_keeps_the_tolerances_per_direction() -> None:
    b = resolve(behavior(up={"tolerance": "50m"}, down={"tolerance": 0.2}))
    assert (b.tolerances.up, b.tolerances.down) == (0.05, 0.2)
    assert resolve(None) is DEFAULT_BEHAVIOR
    assert (DEFAULT_BEHAVIOR.tolerances.up, DEFAULT_BEHAVIOR.tolerances.down) == (0.1, 0.1)


# --- horizontal_test.go: TestCalculateScale{Up,Down}Limit* --------------------------------------


def _rules(select: str, *policies: tuple[str, int, int], window: float = 0.0) -> Rules:
    return Rules(
        window=window,
        select=select,  # type: ignore[arg-type]
        policies=tuple(RatePolicy(t, v, p) for t, v, p in policies),  # type: ignore[arg-type]
    )


def test_TestCalculateScaleUpLimitWithScalingRules() -> None:
    rules = _rules("Min", ("Pods", 2, 60), ("Percent", 50, 60), window=300)
    assert scale_up_limit(1, [], rules, NOW) == 2


def test_TestCalculateScaleDownLimitWithBehaviors() -> None:
    rules = _rules("Min", ("Pods", 2, 60), ("Percent", 50, 60), window=300)
    assert scale_down_limit(5, [], rules, NOW) == 3


# --- horizontal_test.go: TestScalingWithRules (convertDesiredReplicasWithBehaviorRate) ---------

_CONDITION = {
    "DesiredWithinRange": None,
    "ScaleUpLimit": "rate_limit",
    "ScaleDownLimit": "rate_limit",
    "TooManyReplicas": "max",
    "TooFewReplicas": "min",
}

SCALING_WITH_RULES = [
    # name, up events, down events, min, max, up rules, down rules, current, desired, want, cond
    ("prenormalized desired replicas within range", None, None, 3, 8, None, None, 5, 7, 7,
     "DesiredWithinRange"),
    ("prenormalized desired replicas < minReplicas", None, None, 2, 8, None, None, 3, 1, 2,
     "TooFewReplicas"),
    ("prenormalized desired replicas within range when minReplicas is 0", None, None, 0, 10,
     None, None, 1, 0, 0, "DesiredWithinRange"),
    ("maxReplicas is the limit because maxReplicas < scaleUpLimit", None, None, 1, 10, None,
     None, 20, 1000, 10, "TooManyReplicas"),
    ("desired replica count is more than the maximum replica count", None, None, 100, 150, None,
     None, 100, 1000, 150, "TooManyReplicas"),
    ("scaleUpLimit is the limit because scaleUpLimit < maxReplicas with user policies", None,
     None, 1, 2000, (0, 0, 1, 60, 0), None, 3, 1000, 4, "ScaleUpLimit"),
    # skipped upstream (testThis), but its numbers hold
    ("scaleDownLimit is the limit because scaleDownLimit > minReplicas with user defined "
     "policies", None, None, 3, 2000, None, (20, 60, 0, 0, 0), 1000, 3, 980, "ScaleDownLimit"),
    ("scaleUp with default behavior", None, None, 1, 1000, None, None, 10, 50, 20,
     "ScaleUpLimit"),
    ("scaleUp with pods policy larger than percent policy", None, None, 1, 1000,
     (100, 60, 100, 60, 0), None, 10, 500, 110, "ScaleUpLimit"),
    ("scaleUp with percent policy larger than pods policy", None, None, 1, 1000,
     (2, 60, 100, 60, 0), None, 10, 500, 20, "ScaleUpLimit"),
    ("scaleUp with spec MaxReplicas limitation with large pod policy", None, None, 1, 1000,
     (100, 60, 0, 0, 0), None, 10, 50, 50, "DesiredWithinRange"),
    ("scaleUp with spec MaxReplicas limitation with large percent policy", None, None, 1, 1000,
     (10000, 60, 0, 0, 0), None, 10, 50, 50, "DesiredWithinRange"),
    ("scaleUp with pod policy limitation", None, None, 1, 1000, (30, 60, 0, 0, 0), None, 10, 50,
     40, "ScaleUpLimit"),
    ("scaleUp with percent policy limitation", None, None, 1, 1000, (0, 0, 200, 60, 0), None, 10,
     50, 30, "ScaleUpLimit"),
    ("scaleDown with percent policy larger than pod policy", None, None, 1, 1000, None,
     (20, 60, 1, 60, 300), 100, 2, 80, "ScaleDownLimit"),
    ("scaleDown with pod policy larger than percent policy", None, None, 1, 1000, None,
     (2, 60, 1, 60, 300), 100, 2, 98, "ScaleDownLimit"),
    ("scaleDown with spec MinReplicas=nil limitation with large pod policy", None, None, 1, 1000,
     None, (100, 60, 0, 0, 300), 10, 0, 1, "TooFewReplicas"),
    ("scaleDown with spec MinReplicas limitation with large pod policy", None, None, 1, 1000,
     None, (100, 60, 0, 0, 300), 10, 0, 1, "TooFewReplicas"),
    ("scaleDown with spec MinReplicas limitation with large percent policy", None, None, 5, 1000,
     None, (0, 0, 100, 60, 300), 10, 2, 5, "TooFewReplicas"),
    ("scaleDown with pod policy limitation", None, None, 1, 1000, None, (5, 60, 0, 0, 300), 10, 2,
     5, "ScaleDownLimit"),
    ("scaleDown with percent policy limitation", None, None, 1, 1000, None, (0, 0, 50, 60, 300),
     10, 5, 5, "DesiredWithinRange"),
    ("scaleUp with spec MaxReplicas limitation with large pod policy and events", [1, 5, 9], None,
     1, 200, (300, 60, 0, 0, 0), None, 100, 500, 200, "TooManyReplicas"),
    ("scaleUp with spec MaxReplicas limitation with large percent policy and events", [1, 5, 9],
     None, 1, 200, (0, 0, 10000, 60, 0), None, 100, 500, 200, "TooManyReplicas"),
    ("scaleUp with currentReplicas limitation with rate.PeriodSeconds with a lot of recent scale "
     "up events", [1, 5, 9], None, 1, 1000, (5, 120, 0, 0, 0), None, 100, 500, 100,
     "ScaleUpLimit"),
    ("scaleUp with pod policy and previous scale up events", [1, 5, 9], None, 1, 1000,
     (150, 120, 0, 0, 0), None, 100, 500, 235, "ScaleUpLimit"),
    ("scaleUp with percent policy and previous scale up events", [1, 5, 9], None, 1, 1000,
     (0, 0, 200, 120, 0), None, 100, 500, 255, "ScaleUpLimit"),
    ("scaleDown with default policy and previous events", None, [1, 5, 9], 1, 1000, None, None,
     10, 5, 5, "DesiredWithinRange"),
    ("scaleDown with spec MinReplicas=nil limitation with large pod policy and previous events",
     None, [1, 5, 9], 1, 1000, None, (115, 120, 0, 0, 300), 100, 0, 1, "TooFewReplicas"),
    ("scaleDown with spec MinReplicas limitation with large pod policy and previous events",
     None, [1, 5, 9], 5, 1000, None, (130, 120, 0, 0, 300), 100, 0, 5, "TooFewReplicas"),
    ("scaleDown with spec MinReplicas limitation with large percent policy and previous events",
     None, [1, 5, 9], 5, 1000, None, (0, 0, 100, 120, 300), 100, 2, 5, "TooFewReplicas"),
    ("scaleDown with pod policy limitation and previous events", None, [1, 5, 9], 1, 1000, None,
     (5, 120, 0, 0, 300), 100, 2, 100, "ScaleDownLimit"),
    ("scaleDown with percent policy limitation and previous events", None, [2, 4, 6], 1, 1000,
     None, (0, 0, 50, 120, 300), 100, 0, 56, "ScaleDownLimit"),
    ("scaleDown with previous events preventing further scale down", None, [10, 10, 10], 1, 1000,
     None, (0, 0, 10, 120, 300), 100, 0, 100, "ScaleDownLimit"),
    ("scaleDown with with previous events still allowing more scale down", None, [10, 10, 10], 1,
     1000, None, (0, 0, 1000, 120, 300), 10, 5, 5, "DesiredWithinRange"),
    ("check 'outdated' flag for events for one behavior for up", [8, 12, 9, 11], None, 1, 1000,
     (1000, 60, 0, 0, 0), None, 100, 200, 200, "DesiredWithinRange"),
    ("check that events were not marked 'outdated' for two different policies in the behavior "
     "for up", [8, 12, 9, 11], None, 1, 1000, (1000, 120, 100, 60, 0), None, 100, 200, 200,
     "DesiredWithinRange"),
    ("check that events were marked 'outdated' for two different policies in the behavior for "
     "up", [8, 12, 9, 11], None, 1, 1000, (1000, 30, 100, 60, 0), None, 100, 200, 200,
     "DesiredWithinRange"),
    ("check 'outdated' flag for events for one behavior for down", None, [8, 12, 9, 11], 1, 1000,
     None, (1000, 60, 0, 0, 300), 100, 5, 5, "DesiredWithinRange"),
    ("check that events were not marked 'outdated' for two different policies in the behavior "
     "for down", None, [8, 12, 9, 11], 1, 1000, None, (1000, 120, 100, 60, 300), 100, 5, 5,
     "DesiredWithinRange"),
    ("check that events were marked 'outdated' for two different policies in the behavior for "
     "down", None, [8, 12, 9, 11], 1, 1000, None, (1000, 30, 100, 60, 300), 100, 5, 5,
     "DesiredWithinRange"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "up_events", "down_events", "lo", "hi", "up", "down", "current", "desired", "want",
     "condition"),
    SCALING_WITH_RULES,
    ids=[c[0] for c in SCALING_WITH_RULES],
)  # fmt: skip
def test_TestScalingWithRules(
    name: str,
    up_events: list[int] | None,
    down_events: list[int] | None,
    lo: int,
    hi: int,
    up: tuple[int, int, int, int, int] | None,
    down: tuple[int, int, int, int, int] | None,
    current: int,
    desired: int,
    want: int,
    condition: str,
) -> None:
    events = generate_events_uniform_distribution(up_events, 120) if up_events else []
    if down_events:
        events += [(t, -c) for t, c in generate_events_uniform_distribution(down_events, 120)]
    resolved = resolve(
        behavior(
            up=generate_scaling_rules(*up) if up else None,
            down=generate_scaling_rules(*down) if down else None,
        )
    )
    got = limit_rate(current, desired, lo, hi, events, resolved, NOW)
    assert got.replicas == want
    assert got.rule == _CONDITION[condition]


def test_selectpolicy_disabled_holds_current() -> None:
    resolved = resolve(behavior(down={"selectPolicy": "Disabled"}))
    got = limit_rate(10, 2, 1, 100, [], resolved, NOW)
    assert (got.replicas, got.rule) == (10, "disabled")
    # Scaling up is still governed by its own rules.
    assert limit_rate(10, 12, 1, 100, [], resolved, NOW).replicas == 12


# --- horizontal_test.go: TestStoreScaleEvents (what getReplicasChangePerPeriod counts) ---------


@pytest.mark.parametrize(
    ("name", "prev", "expected_change"),
    [
        ("empty entries with default behavior", [], 0),
        ("one outdated entry to be replaced with behavior", [(7, 61)], 0),
        ("one actual entry to be not touched with behavior", [(7, 58)], 7),
        ("two entries, one of them to be replaced", [(7, 61), (6, 59)], 6),
        ("replace one entry, use policies with different periods", [(8, 29), (6, 59), (7, 61),
                                                                    (9, 61)], 14),
        ("two entries, both actual", [(7, 58), (6, 59)], 13),
    ],
)  # fmt: skip
def test_TestStoreScaleEvents(name: str, prev: list[tuple[int, int]], expected_change: int) -> None:
    up = [(NOW - age, change) for change, age in prev]
    assert replicas_change(up, 60, NOW) == expected_change
    down = [(t, -c) for t, c in up]
    assert replicas_change(down, 60, NOW) == -expected_change
    # Storing a new event drops what is older than the longest period and keeps the rest.
    stored = record_event(up, NOW, 5, NOW, 60)
    assert list(stored) == [e for e in up if e[0] > NOW - 60] + [(NOW, 5)]


# --- horizontal_test.go: TestNormalizeDesiredReplicasWithBehavior ------------------------------

NORMALIZE_WITH_BEHAVIOR = [
    # name, recommendations (value, age s), current, desired, want, kept (values), up w, down w
    ("empty recommendations for scaling down", [], 100, 5, 5, [5], 0, 0),
    ("simple scale down stabilization", [(4, 120), (5, 60)], 100, 3, 5, [4, 5, 3], 0, 180),
    ("simple scale up stabilization", [(4, 120), (5, 60)], 1, 7, 4, [4, 5, 7], 300, 0),
    ("no scale down stabilization", [(1, 120), (2, 60)], 100, 3, 3, [1, 2, 3], 300, 0),
    ("no scale up stabilization", [(4, 120), (5, 60)], 1, 3, 3, [4, 5, 3], 0, 300),
    # Upstream reuses one obsolete slot and keeps the other obsolete entry (it never counts
    # again); governor drops every obsolete entry, so only the new recommendation is kept.
    ("no scale down stabilization, reuse recommendation element", [(10, 600), (9, 540)], 100, 3,
     3, [3], 0, 0),
    ("no scale up stabilization, reuse recommendation element", [(10, 600), (9, 540)], 1, 100,
     100, [100], 0, 0),
    ("scale down stabilization, reuse one of obsolete recommendation element",
     [(10, 600), (4, 60), (5, 120), (9, 540)], 100, 3, 5, [5, 4, 3], 0, 180),
    ("scale up stabilization, reuse one of obsolete recommendation element",
     [(10, 6000), (6, 60), (5, 120), (9, 180)], 1, 100, 5, [9, 5, 6, 100], 300, 0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "recs", "current", "desired", "want", "kept", "up_window", "down_window"),
    NORMALIZE_WITH_BEHAVIOR,
    ids=[c[0] for c in NORMALIZE_WITH_BEHAVIOR],
)
def test_TestNormalizeDesiredReplicasWithBehavior(
    name: str,
    recs: list[tuple[int, int]],
    current: int,
    desired: int,
    want: int,
    kept: list[int],
    up_window: int,
    down_window: int,
) -> None:
    # governor keeps its history in time order (upstream's slice is in slot order).
    history = sorted((NOW - age, value) for value, age in recs)
    got, _, _ = stabilized(history, current, desired, NOW, up_window, down_window)
    assert got == want
    stored = recorded(history, desired, NOW, 15.0, max(up_window, down_window))
    assert [r for _, r in stored] == kept


def test_TestNormalizeDesiredReplicas_legacy_down_window() -> None:
    # horizontal_test.go TestNormalizeDesiredReplicas: the pre-behavior 5 min down window.
    cases = [
        ([], 5, 5),
        ([(4, 120), (5, 60)], 3, 5),
        ([(1, 120), (2, 60)], 3, 3),
        ([(10, 600), (9, 540)], 3, 3),
        ([(10, 600), (4, 60), (5, 120), (9, 540)], 3, 5),
    ]
    for recs, desired, want in cases:
        history = sorted((NOW - age, value) for value, age in recs)
        assert stabilized(history, 100, desired, NOW, 0, 300)[0] == want


# --- the bucketed history -----------------------------------------------------------------------


def test_one_bucket_keeps_its_min_and_max() -> None:
    start = 15.0 * 1000  # a bucket boundary
    history: tuple[tuple[float, int], ...] = ()
    for t, r in [(0.0, 5), (3.0, 9), (7.0, 2), (14.0, 6)]:
        history = recorded(history, r, start + t, 15.0, 300.0)
    assert history == ((start + 14.0, 2), (start + 14.0, 9))
    # The next step opens a new bucket.
    history = recorded(history, 4, start + 15.0, 15.0, 300.0)
    assert history[-1] == (start + 15.0, 4)
    assert len(history) == 3


def test_bucketing_preserves_both_windows_answers() -> None:
    # Ten evaluations a step: the bucketed history gives the same stabilization as the full one
    # whenever no evaluation of a bucket is past a window's edge.
    full: list[tuple[float, int]] = []
    bucketed: tuple[tuple[float, int], ...] = ()
    values = [7, 3, 9, 4, 4, 8, 2, 6, 5, 1, 3, 7, 8, 2, 9, 6, 4, 3, 5, 7]
    for i, v in enumerate(values * 3):
        t = NOW + i * 1.5
        _, a_up, a_down = stabilized(full, 5, v, t, 30.0, 90.0)
        _, b_up, b_down = stabilized(bucketed, 5, v, t, 30.0, 90.0)
        # Bucketed entries may outlive their first evaluations by < one step: never looser.
        assert b_up <= a_up
        assert b_down >= a_down
        full = [*[e for e in full if e[0] > t - 90.0], (t, v)]
        bucketed = recorded(bucketed, v, t, 15.0, 90.0)
    assert len(bucketed) <= 2 * (90 // 15 + 1)


def test_record_sampled_keeps_a_steps_first_evaluation_and_every_change() -> None:
    start = 15.0 * 1000  # a bucket boundary
    history = sampled([], 6, start, 15.0, 300.0, changed=False)
    assert history == ((start, 6),)
    # A later evaluation of the step that left the count alone: not a new sample.
    assert sampled(history, 9, start + 5.0, 15.0, 300.0, changed=False) == ((start, 6),)
    # One that moved the count is kept (merged into the step, as record does).
    history = sampled(history, 8, start + 10.0, 15.0, 300.0, changed=True)
    assert history == ((start + 10.0, 6), (start + 10.0, 8))
    # The next step's first evaluation is always a sample.
    history = sampled(history, 4, start + 15.0, 15.0, 300.0, changed=False)
    assert history[-1] == (start + 15.0, 4)


def test_record_sampled_keeps_the_initial_recommendation_beside_the_first() -> None:
    # HPA's recordInitialRecommendation is stamped at the same instant as the first evaluation.
    assert sampled([(NOW, 7)], 3, NOW, 15.0, 300.0, changed=False) == ((NOW, 3), (NOW, 7))


@given(
    steps=st.lists(st.tuples(st.integers(0, 20), st.booleans()), max_size=30),
    offset=st.floats(min_value=0.0, max_value=14.9),
)
def test_record_sampled_is_record_at_one_evaluation_per_step(
    steps: list[tuple[int, bool]], offset: float
) -> None:
    # HPA's cadence (the simulator, HPA-compatible mode): nothing changes.
    some: Pairs = ()
    every: Pairs = ()
    for i, (value, changed) in enumerate(steps):
        t = NOW + i * 15.0 + offset
        some = sampled(some, value, t, 15.0, 90.0, changed=changed)
        every = recorded(every, value, t, 15.0, 90.0)
        assert some == every


def test_history_is_pruned_past_the_longest_window() -> None:
    history = [(NOW - 400.0, 9), (NOW - 299.0, 8)]
    assert recorded(history, 3, NOW, 15.0, 300.0) == ((NOW - 299.0, 8), (NOW, 3))


def _naive_stabilize(
    history: list[tuple[float, int]], current: int, desired: int, up_w: float, down_w: float
) -> tuple[int, int, int]:
    """HPA's loop, verbatim: the reference the bisecting implementation must match."""
    up = down = desired
    for t, r in history:
        if t > NOW - up_w:
            up = min(up, r)
        if t > NOW - down_w:
            down = max(down, r)
    return min(max(current, up), down), up, down


entries = st.lists(
    st.tuples(st.floats(min_value=NOW - 400, max_value=NOW), st.integers(0, 50)), max_size=40
)


@given(
    history=entries,
    current=st.integers(0, 50),
    desired=st.integers(0, 50),
    up_w=st.sampled_from([0.0, 15.0, 60.0, 300.0]),
    down_w=st.sampled_from([0.0, 15.0, 60.0, 300.0]),
)
def test_stabilize_matches_hpas_loop(
    history: list[tuple[float, int]], current: int, desired: int, up_w: float, down_w: float
) -> None:
    history.sort()
    assert stabilized(history, current, desired, NOW, up_w, down_w) == _naive_stabilize(
        history, current, desired, up_w, down_w
    )


@given(times=st.lists(st.floats(min_value=NOW - 100, max_value=NOW + 100), max_size=30))
def test_record_keeps_time_order_even_when_the_clock_goes_back(times: list[float]) -> None:
    history: tuple[tuple[float, int], ...] = ()
    for i, t in enumerate(times):
        history = recorded(history, i, t, 15.0, 300.0)
        assert list(history) == sorted(history, key=lambda e: e[0])
