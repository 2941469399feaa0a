"""The windows a policy asks for (governor.window_sizes): sizes, hops on the grid, the limits,
and the aggregator's core rebuilding a workload's windows when its policy changes them."""

from __future__ import annotations

import math
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from governor import events
from governor.cores.aggregator import AggregatorCore, PolicyWindows, WorkloadSamples
from governor.policy.recommend import keep_newest
from governor.spec import ObjectMeta, ScalingPolicy, ScalingPolicySpec
from governor.window_sizes import (
    MAX_OPEN_WINDOWS,
    MAX_WINDOW_SECONDS,
    WindowSettings,
    hop_for,
    window_sizes,
)
from governor.windows import WindowAcc, WindowView, to_window_view, views

W = "ns/Deployment/web"
DEFAULTS = WindowSettings()  # 60 s / 10 s, 6 s / 2 s, grid 10 s


def spec(panic: dict[str, Any] | None) -> ScalingPolicySpec:
    obj: dict[str, Any] = {
        "targetRef": {"kind": "Deployment", "name": "web"},
        "maxReplicas": 10,
        "metrics": [{"name": "rps", "target": {"type": "AverageValue", "averageValue": 10}}],
    }
    if panic is not None:
        obj["panic"] = panic
    return msgspec.convert(obj, ScalingPolicySpec)


sizes_s = st.one_of(
    st.integers(1, int(MAX_WINDOW_SECONDS)).map(float),
    st.floats(0.01, MAX_WINDOW_SECONDS, allow_nan=False),
)
grids = st.one_of(st.integers(1, 120).map(float), st.floats(0.1, 120.0))


@given(size=sizes_s, grid=grids)
def test_a_hop_opens_at_most_the_limit_of_windows_and_fits_the_window(
    size: float, grid: float
) -> None:
    hop = hop_for(size, grid)
    assert 0 < hop <= size
    assert math.ceil(size / hop - 1e-9) <= MAX_OPEN_WINDOWS


@given(size=st.integers(1, 600), grid=st.integers(1, 120))
def test_within_the_limit_a_window_closes_at_every_grid_point(size: int, grid: int) -> None:
    hop = hop_for(float(size), float(grid))
    if size / math.gcd(size, grid) <= MAX_OPEN_WINDOWS:
        assert hop == math.gcd(size, grid)  # the simulator's rule: ends on every decision
    assert hop % 1 == 0 and (hop % math.gcd(size, grid)) == 0  # on the grid's multiples


@given(
    panic=st.one_of(
        st.none(),
        st.tuples(st.integers(1, 599), st.integers(1, 600))
        .filter(lambda t: t[0] < t[1])
        .map(lambda t: {"windowSeconds": t[0], "stableWindowSeconds": t[1]}),
    )
)
def test_the_sizes_are_the_panic_sections_or_else_the_defaults(
    panic: dict[str, Any] | None,
) -> None:
    s = window_sizes(spec(panic), DEFAULTS)
    if panic is None:
        assert s is DEFAULTS  # no policy windows: the aggregator's settings, hops and all
        return
    assert (s.panic_window_seconds, s.stable_window_seconds) == (
        panic["windowSeconds"],
        panic["stableWindowSeconds"],
    )
    assert s.stable_hop_seconds == hop_for(s.stable_window_seconds, DEFAULTS.hop_grid_seconds)
    assert s.panic_hop_seconds == hop_for(s.panic_window_seconds, DEFAULTS.hop_grid_seconds)


def test_the_default_panic_section_on_the_default_grid_is_the_default_windows() -> None:
    # So a policy with `panic: {}` changes nothing in the aggregator (the benchmark's policies).
    assert window_sizes(spec({}), DEFAULTS) == DEFAULTS
    assert window_sizes(None, DEFAULTS) is DEFAULTS


def test_a_long_window_hops_coarser_to_stay_within_the_limit() -> None:
    s = window_sizes(spec({"windowSeconds": 7, "stableWindowSeconds": 600}), DEFAULTS)
    assert (s.stable_hop_seconds, s.panic_hop_seconds) == (50.0, 1.0)  # 12 and 7 windows


def samples(first: int, times: list[float]) -> list[tuple[int, events.MetricSample]]:
    return [
        (first + i, events.MetricSample(workload=W, metric="rps", value=1.0, timestamp=ts))
        for i, ts in enumerate(times)
    ]


def sizes_out(out: Any) -> dict[str, float]:
    got: dict[str, float] = {}
    for msg in out.records:
        for v in views(msg):
            got[v.window] = v.end - v.start
    return got


def test_the_core_uses_the_policys_windows_and_rebuilds_them_when_it_changes() -> None:
    core = AggregatorCore(DEFAULTS)
    core.on_policy(W, window_sizes(spec({"windowSeconds": 4, "stableWindowSeconds": 30}), DEFAULTS))
    out = core.on(WorkloadSamples(W, samples(0, [1000.0, 1001.0]), now=0.0))
    assert sizes_out(out) == {"stable": 30.0, "panic": 4.0}
    core.checkpoint()

    bigger = window_sizes(spec({"windowSeconds": 8, "stableWindowSeconds": 120}), DEFAULTS)
    core.on_policy(W, bigger)
    [write] = core.checkpoint().checkpoints  # the rebuilt windows are the workload's new value
    state = msgspec.msgpack.decode(write.value, type=dict[str, Any])
    assert state["rps"][0] == 1  # the offset stays: samples folded are not folded again
    # each `now` an interval after the last: the estimates are not held back by the throttle
    out = core.on(WorkloadSamples(W, samples(0, [1000.0, 1001.0, 1002.0]), now=3.0))
    assert sizes_out(out) == {"stable": 120.0, "panic": 8.0}
    [msg] = out.records
    assert msg.count == 1  # afresh: only the new sample (offset 2), not the ones held before

    core.on_policy(W, None)  # the policy deleted: the defaults
    out = core.on(WorkloadSamples(W, samples(3, [1003.0]), now=6.0))
    assert sizes_out(out) == {"stable": 60.0, "panic": 6.0}


def test_a_restored_value_of_other_sizes_takes_the_policys_windows() -> None:
    old = AggregatorCore(DEFAULTS)
    old.on(WorkloadSamples(W, samples(0, [1000.0]), now=0.0))
    [write] = old.checkpoint().checkpoints
    core = AggregatorCore(DEFAULTS)
    core.on_policy(W, window_sizes(spec({"windowSeconds": 4, "stableWindowSeconds": 30}), DEFAULTS))
    assert core.restore(W, write.value)
    assert core.checkpoint().checkpoints  # conformed: written back with the new windows
    out = core.on(WorkloadSamples(W, samples(0, [1000.0, 1001.0]), now=1.0))
    assert sizes_out(out) == {"stable": 30.0, "panic": 4.0}
    assert core.take_counts() == {"duplicate": 1, "ok": 1}


def test_an_unchanged_policy_rebuilds_nothing() -> None:
    core = AggregatorCore(DEFAULTS)
    core.on(WorkloadSamples(W, samples(0, [1000.0]), now=0.0))
    core.checkpoint()
    core.on_policy(W, window_sizes(spec({}), DEFAULTS))  # the defaults' sizes
    assert not core.checkpoint().checkpoints


def view(start: float, end: float, count: int) -> WindowView:
    acc = WindowAcc(start=start, end=end, count=count, sum=float(count), newest=start + 1)
    return to_window_view(acc, "stable", closed=False)


def test_the_decider_takes_a_window_of_a_new_size_even_if_it_starts_earlier() -> None:
    held: dict[Any, WindowView] = {}
    keep_newest(held, "rps", [view(980.0, 1010.0, 20)])  # a 30 s window
    keep_newest(held, "rps", [view(900.0, 1020.0, 1)])  # the policy's new 120 s window
    assert held[("rps", "stable")].end - held[("rps", "stable")].start == 120.0
    keep_newest(held, "rps", [view(890.0, 1010.0, 5)])  # an older one of the same size: not
    assert held[("rps", "stable")].start == 900.0


def record(panic: dict[str, Any] | None, **kw: Any) -> events.PolicyRecord:
    s = spec(panic)
    changes = {"mode": kw.pop("mode")} if "mode" in kw else {}
    policy = ScalingPolicy(
        metadata=ObjectMeta(name="web", namespace="ns"),
        spec=msgspec.structs.replace(s, **changes),
    )
    return events.PolicyRecord(policy=policy, **kw)


def test_the_policies_table_gives_each_workload_its_active_policys_windows() -> None:
    table = PolicyWindows(DEFAULTS, "file")
    small = window_sizes(spec({"windowSeconds": 4, "stableWindowSeconds": 30}), DEFAULTS)
    assert table.on("ns/web", record({"windowSeconds": 4, "stableWindowSeconds": 30})) == {W: small}
    # A new version of the same policy: one change, not the defaults first.
    assert table.on("ns/web", record({})) == {W: DEFAULTS}
    assert table.on("ns/web", record(None, origin="cluster")) == {}  # another source: ignored
    assert table.on("ns/web", record({"windowSeconds": 4}, mode="Shadow")) == {W: None}
    assert table.on("ns/web", record({"windowSeconds": 4, "stableWindowSeconds": 30})) == {W: small}
    assert table.on("ns/web", None) == {W: None}  # deleted: the defaults
    assert table.on("ns/web", None) == {}
