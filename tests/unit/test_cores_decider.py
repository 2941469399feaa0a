"""DeciderCore: the decider's memory and its two stages, without Kafka."""

from pathlib import Path

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.cores.decider import DeciderCore
from governor.cores.decider_memory import checkpoint_of
from governor.events import LoadWindow, WindowView, WorkloadState
from governor.spec import ScalingPolicy, policies_from_yaml
from governor.windows import views
from tests.support.policies import scaling_policy

EXAMPLE = Path(__file__).parents[2] / "examples" / "web-policy.yaml"
WL = "shop/Deployment/web"


def policy() -> ScalingPolicy:
    (p,) = policies_from_yaml(EXAMPLE.read_text())
    return p


def window(end: float, mean: float, kind: str = "stable", closed: bool = False) -> LoadWindow:
    size = 60.0 if kind == "stable" else 6.0
    return LoadWindow(
        workload=WL, metric="rps", window=kind, start=end - size, end=end, count=10,
        mean=mean, max=mean, p95=mean, newest_sample=end - 0.5, closed=closed,
    )  # fmt: skip


def state(spec: int, ready: int | None = None, at: float = 0.0) -> WorkloadState:
    return WorkloadState(
        workload=WL, spec_replicas=spec, ready_replicas=spec if ready is None else ready,
        observed_at=at,
    )  # fmt: skip


def core_with(
    load: float, replicas: int, now: float, pol: ScalingPolicy | None = None
) -> DeciderCore:
    core = DeciderCore()
    core.on_policy("shop/web", pol or policy())
    core.on_workload(state(replicas, at=now - 1))
    core.on_window(window(now, load))
    core.on_window(window(now, load, "panic"))
    return core


def test_no_action_before_workload_state_arrives() -> None:
    core = DeciderCore()
    core.on_policy("shop/web", policy())
    core.on_window(window(100.0, 700.0))
    out = core.decide(WL, 100.0)
    assert out.decision is None
    assert "WorkloadState" in out.note


def test_scale_up_decision_carries_reasons_and_seq() -> None:
    now = 1000.0
    core = core_with(load=700.0, replicas=2, now=now)  # 700 rps / 70 per pod -> 10
    out = core.decide(WL, now)
    d = out.decision
    assert d is not None
    assert d.seq == 1
    assert d.from_replicas == 2
    assert 2 < d.to_replicas <= 40
    assert d.reasons
    assert d.policy == "shop/web"
    assert out.checkpoint is not None
    assert out.checkpoint.seq == 1


def test_in_flight_decision_is_not_repeated_and_retried_after_grace() -> None:
    now = 1000.0
    core = core_with(load=700.0, replicas=2, now=now)
    first = core.decide(WL, now).decision
    assert first is not None
    # The target has not caught up yet: the same desire is not published again.
    assert core.decide(WL, now + 1).decision is None
    # Past the grace period the request is sent again, with a newer seq.
    core.on_window(window(now + 61, 700.0))
    core.on_window(window(now + 61, 700.0, "panic"))
    again = core.decide(WL, now + 61).decision
    assert again is not None
    assert again.seq > first.seq


def test_checkpoint_restores_seq_so_it_stays_monotonic() -> None:
    now = 1000.0
    core = core_with(load=700.0, replicas=2, now=now)
    cp = core.decide(WL, now).checkpoint
    assert cp is not None
    restarted = core_with(load=2000.0, replicas=2, now=now + 20)
    restarted.on_checkpoint(msgspec.json.decode(msgspec.json.encode(cp), type=type(cp)))
    d = restarted.decide(WL, now + 20).decision  # past the 15 s rate-limit period
    assert d is not None
    assert d.seq == cp.seq + 1


def test_older_input_than_last_decision_is_not_decided_on() -> None:
    now = 1000.0
    core = core_with(load=700.0, replicas=2, now=now)
    assert core.decide(WL, now).decision is not None
    # A later restart sees only an older window (e.g. replayed): it must not decide on it.
    cp = core.decide(WL, now + 1).checkpoint or checkpoint_of(WL, core.memory[WL], now + 1)
    fresh = DeciderCore()
    fresh.on_checkpoint(cp)
    fresh.on_policy("shop/web", policy())
    fresh.on_workload(state(2, at=now))
    fresh.on_window(window(now - 300, 100.0))
    out = fresh.decide(WL, now + 120)
    assert out.decision is None or out.decision.newest_input >= cp.last_newest_input


def test_policy_tombstone_stops_decisions() -> None:
    now = 1000.0
    core = core_with(load=700.0, replicas=2, now=now)
    core.on_policy("shop/web", None)
    assert core.decide(WL, now).note == "no policy"


def kafka_policy(allow_idle: bool = False) -> ScalingPolicy:
    return scaling_policy(
        "consumer",
        "shop",
        {
            "targetRef": {"kind": "Deployment", "name": "web"},
            "maxReplicas": 50,
            "metrics": [
                {
                    "name": "lag",
                    "source": {
                        "type": "kafka_lag",
                        "topic": "orders",
                        "consumerGroup": "g",
                        "allowIdleConsumers": allow_idle,
                    },
                    "target": {"type": "AverageValue", "averageValue": 10},
                }
            ],
            "behavior": {
                "scaleUp": {"policies": [{"type": "Pods", "value": 100, "periodSeconds": 15}]}
            },
        },
    )


def lag_window(metric: str, value: float, end: float) -> LoadWindow:
    return LoadWindow(
        workload=WL, metric=metric, window="stable", start=end - 60, end=end, count=5,
        mean=value, max=value, p95=value, newest_sample=end - 1,
    )  # fmt: skip


def test_kafka_lag_consumer_is_capped_at_the_partition_count() -> None:
    now = 1000.0
    for allow_idle, want in ((False, 6), (True, 40)):
        core = DeciderCore()
        core.on_policy("shop/consumer", kafka_policy(allow_idle))
        core.on_workload(state(1, at=now - 1))
        core.on_window(lag_window("lag", 400.0, now))  # 400 / 10 -> 40 replicas
        core.on_window(lag_window("lag.partitions", 6.0, now))
        d = core.decide(WL, now).decision
        assert d is not None
        assert d.to_replicas == want, allow_idle
        if not allow_idle:
            assert any(r.rule == "cap" for r in d.reasons)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=100, max_value=130).map(float),  # end
            st.floats(min_value=0, max_value=500, allow_nan=False),  # mean
            st.booleans(),  # closed
            st.integers(min_value=0, max_value=3),  # how many windows the message carries
        ),
        max_size=12,
    )
)
def test_on_load_equals_on_window_of_each_view(
    messages: list[tuple[float, float, bool, int]],
) -> None:
    """A load message straight into the core (`on_load`, the service's path: no LoadWindow
    built per carried window) keeps the same newest views and decides the same as `on_window`
    of each of `views(message)` (the journal's replay path)."""
    direct, by_view = core_with(40.0, 2, 99.0), core_with(40.0, 2, 99.0)
    for end, mean, closed, extra in messages:
        first = window(end, mean, "stable", closed)
        first.more = [carried(end - i, mean + i, i, closed) for i in range(extra)]
        direct.on_load(first)
        for view in views(first):
            by_view.on_window(view)
    assert direct.windows.keys() == by_view.windows.keys()
    for wl, series in by_view.windows.items():
        got = direct.windows[wl]
        assert got.keys() == series.keys()
        for key, view in series.items():
            fields = WindowView.__struct_fields__
            assert [getattr(got[key], f) for f in fields] == [getattr(view, f) for f in fields]
    assert direct.decide(WL, 131.0).recommendation == by_view.decide(WL, 131.0).recommendation


def carried(end: float, mean: float, i: int, closed: bool) -> WindowView:
    return WindowView(
        window="panic" if i % 2 == 0 else "stable", start=end - 6, end=end, count=5 + i,
        mean=mean, max=mean, p95=mean, newest_sample=end - 0.5, closed=closed,
    )  # fmt: skip


def value_policy() -> ScalingPolicy:
    # A Value target: desired = ceil(current × value / target), a ratio over the current count,
    # so a window that stopped moving would shrink it again on every evaluation.
    text = EXAMPLE.read_text().replace(
        "target: {type: AverageValue, averageValue: 70}", "target: {type: Value, value: 70}"
    )
    text = text.replace("stabilizationWindowSeconds: 300", "stabilizationWindowSeconds: 0")
    (p,) = policies_from_yaml(text)
    return p


def frozen_core(load: float, replicas: int, now: float) -> DeciderCore:
    return core_with(load, replicas, now, value_policy())


def test_a_window_with_no_new_sample_never_lowers_replicas_again() -> None:
    now = 1000.0
    core = frozen_core(load=35.0, replicas=20, now=now)  # ratio 0.5: 20 -> 10
    first = core.decide(WL, now).decision
    assert first is not None and first.to_replicas == 10
    core.on_workload(state(10, at=now + 1))
    # The samples stopped (the same windows): no second halving on the old data. (Within the
    # late bound, 2 steps of 15 s: later, `held_when_late` holds before this rule is asked.)
    for t in (now + 5, now + 10, now + 20):
        out = core.decide(WL, t)
        assert out.decision is None, out.decision
        assert "frozen" in out.note
    # A newer sample, the same load: the ratio over 10 pods is data again.
    core.on_window(window(now + 81, 35.0))
    core.on_window(window(now + 81, 35.0, "panic"))
    later = core.decide(WL, now + 81).decision
    assert later is not None and later.to_replicas == 5


def test_a_frozen_window_still_scales_up_and_backfilled_samples_are_not_frozen() -> None:
    # Samples stamped a minute in the past (a skewed clock, a delayed source; not yet stale)
    # keep moving in event time: each newer one may lower replicas; a frozen one may raise them.
    now = 1000.0
    core = frozen_core(load=35.0, replicas=20, now=now - 60)
    assert core.decide(WL, now).decision is not None  # to 10, on input stamped now - 60
    core.on_workload(state(10, at=now + 1))
    core.on_window(window(now - 40, 35.0))
    core.on_window(window(now - 40, 35.0, "panic"))
    d = core.decide(WL, now + 20).decision
    assert d is not None and d.to_replicas == 5
    core.on_workload(state(5, at=now + 21))
    core.on_window(window(now - 40, 140.0, "panic"))  # same newest sample, twice the target
    up = core.decide(WL, now + 40).decision
    assert up is not None and up.to_replicas > 5


@settings(max_examples=100, deadline=None)
@given(
    replicas=st.integers(3, 40),
    ratio=st.floats(0.05, 0.85),
    gaps=st.lists(st.floats(1.0, 120.0), min_size=1, max_size=8),
)
def test_frozen_windows_lower_replicas_at_most_once(
    replicas: int, ratio: float, gaps: list[float]
) -> None:
    now = 1000.0
    core = frozen_core(load=70.0 * ratio, replicas=replicas, now=now)
    lowered = []
    t = now
    current = replicas
    for gap in [0.0, *gaps]:
        t += gap
        d = core.decide(WL, t).decision
        if d is not None and d.to_replicas < current:
            lowered.append(d.to_replicas)
        if d is not None:
            current = d.to_replicas
            core.on_workload(state(current, at=t + 0.5))
    assert len(lowered) <= 1, lowered


def late_core(now: float, lag: float = 0.5) -> DeciderCore:
    # 10 rps for 10 pods: the metric asks for the minimum (2), the 300 s stabilization window
    # holds 10 until the 10 recorded at `now` ages out.
    core = core_with(load=10.0, replicas=10, now=now - lag + 0.5)
    assert core.decide(WL, now).decision is None  # held by the stabilization window
    return core


def feed(core: DeciderCore, end: float, load: float) -> None:
    core.on_window(window(end, load))
    core.on_window(window(end, load, "panic"))


def test_a_scale_down_on_input_that_stopped_arriving_is_held_until_it_catches_up() -> None:
    # A decider cut off from the broker: the stabilization window ages out on its last windows.
    now = 1000.0
    core = late_core(now)
    for t in range(1, 290, 5):
        feed(core, now + t, 10.0)
        assert core.decide(WL, now + t).decision is None
    cut = now + 286.0
    out = core.decide(WL, cut + 50)  # the 10 of `now` has aged out: would go to 2
    assert out.decision is None
    assert out.recommendation is not None and out.recommendation.desired == 10
    assert any("later than usual" in (r.detail or "") for r in out.recommendation.reasons)
    # The heal: the backlog comes in order; a window 40 s behind still holds, the newest lowers.
    feed(core, cut + 10, 10.0)
    assert core.decide(WL, cut + 50.5).decision is None
    feed(core, cut + 50, 10.0)
    d = core.decide(WL, cut + 51).decision
    assert d is not None and d.to_replicas == 2


def test_input_late_by_a_steady_offset_still_scales_down() -> None:
    # Every sample stamped 60 s before the decider's clock (a skewed clock, a slow source;
    # under the policy's 90 s staleness): the lag's floor absorbs it, and the stabilization
    # window's scale-down goes through.
    now = 1000.0
    core = late_core(now, lag=60.0)
    decided = None
    for t in range(1, 400, 5):
        feed(core, now + t - 60.0, 10.0)
        decided = decided or core.decide(WL, now + t).decision
    assert decided is not None and decided.to_replicas == 2


def test_late_input_still_scales_up() -> None:
    now = 1000.0
    core = late_core(now)
    core.on_window(window(now, 2000.0, "panic"))  # the same newest sample, a burst
    d = core.decide(WL, now + 60).decision  # late by ~54 s, under the 90 s staleness
    assert d is not None and d.to_replicas > 10
