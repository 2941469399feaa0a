"""governor.panes against its definition, governor.windows: over the same samples, in the same
batches, the same closed windows, late counts, estimates and open windows (exact while a window
holds at most max_samples samples; past that count, sum, max and newest stay exact)."""

from __future__ import annotations

import math

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from governor import panes as p
from governor import windows as w
from governor.windows import WindowStats

# Specs panes cut (size a multiple of hop, whole seconds) and two they cannot (window by window).
_sizes = st.sampled_from(
    [(10.0, 10.0), (10.0, 5.0), (6.0, 3.0), (60.0, 15.0), (60.0, 10.0), (6.0, 2.0), (7.0, 2.0)]
    + [(2.5, 1.0)]
)
_values = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
_times = st.one_of(
    st.integers(min_value=0, max_value=300).map(float),
    st.floats(min_value=1000.0, max_value=1200.0, allow_nan=False),
)
_samples = st.lists(st.tuples(_times, _values), max_size=80)
_cuts = st.lists(st.integers(min_value=0, max_value=80), max_size=4)


def _stats(a: WindowStats | None) -> tuple[float, ...] | None:
    if a is None:
        return None
    return (a.start, a.end, a.count, a.sum, a.mean, a.max, a.p95, a.newest)


def _batches(samples: list[tuple[float, float]], cuts: list[int]) -> list[list[tuple[float, float]]]:
    edges = [0, *sorted(min(c, len(samples)) for c in cuts), len(samples)]
    return [samples[a:b] for a, b in zip(edges, edges[1:], strict=False)]


def _replay(
    spec: w.WindowSpec, batches: list[list[tuple[float, float]]], *, exact: bool
) -> p.PaneSeries:
    """Both ways, batch by batch: every result compared; the pane series at the end."""
    old = w.SeriesWindows(spec=spec)
    new = p.fresh(spec)
    for batch in batches:
        old, closed_old, late_old = w.ingest_many(old, batch)
        closed_new, late_new = p.ingest_into(new, batch)
        assert late_new == late_old
        if exact:
            assert [_stats(a) for a in closed_new] == [_stats(a) for a in closed_old]
            est_old = None if old.newest is None else w.estimate(old, old.newest)
            assert _stats(p.estimate(new)) == _stats(est_old)
            assert p.open_windows(new) == old.open
        else:  # thinned: all but the p95 (and the values it is read from)
            pick = [(a.start, a.end, a.count, a.sum, a.max, a.newest) for a in closed_new]
            assert pick == [(a.start, a.end, a.count, a.sum, a.max, a.newest) for a in closed_old]
            for a in p.open_windows(new):
                assert len(a.values) <= spec.max_samples
    return new


@settings(max_examples=300, deadline=None)
@given(
    size_hop=_sizes,
    lateness=st.sampled_from([0.0, 2.0, 5.0, 30.0]),
    samples=_samples,
    cuts=_cuts,
)
def test_panes_emit_what_windows_emit(
    size_hop: tuple[float, float],
    lateness: float,
    samples: list[tuple[float, float]],
    cuts: list[int],
) -> None:
    """Out of order, late, in any batches: the windows of governor.windows, value for value."""
    spec = w.WindowSpec(size=size_hop[0], hop=size_hop[1], allowed_lateness=lateness)
    _replay(spec, _batches(samples, cuts), exact=True)


@settings(max_examples=200, deadline=None)
@given(
    size_hop=_sizes,
    lateness=st.sampled_from([0.0, 30.0]),
    max_samples=st.sampled_from([2, 5]),
    samples=_samples,
    cuts=_cuts,
)
def test_past_max_samples_only_the_p95_is_approximate(
    size_hop: tuple[float, float],
    lateness: float,
    max_samples: int,
    samples: list[tuple[float, float]],
    cuts: list[int],
) -> None:
    spec = w.WindowSpec(
        size=size_hop[0], hop=size_hop[1], allowed_lateness=lateness, max_samples=max_samples
    )
    exact = size_hop[0] == size_hop[1]  # a tumbling window is one pane: thinned the same way
    _replay(spec, _batches(samples, cuts), exact=exact)


@settings(max_examples=100, deadline=None)
@given(size_hop=_sizes, samples=_samples, cuts=_cuts)
def test_the_table_value_does_not_depend_on_the_batches(
    size_hop: tuple[float, float], samples: list[tuple[float, float]], cuts: list[int]
) -> None:
    spec = w.WindowSpec(size=size_hop[0], hop=size_hop[1], allowed_lateness=2.0)
    whole = p.fresh(spec)
    p.ingest_into(whole, samples)
    split = p.fresh(spec)
    for batch in _batches(samples, cuts):
        p.ingest_into(split, batch)
        split = msgspec.msgpack.decode(msgspec.msgpack.encode(split), type=p.PaneSeries)
    assert msgspec.msgpack.encode(split) == msgspec.msgpack.encode(whole)


def test_a_timestamp_the_division_rounds_goes_on_window_by_window() -> None:
    """Near 2**53 floor(ts / hop) can name a pane whose windows are not the ones
    governor.windows gives the sample: the series turns into governor.windows' own."""
    spec = w.hopping(100, 50)
    ts = math.nextafter(660839633363715 * 50.0, 0.0)
    samples = [(ts - 120.0, 1.0), (ts - 60.0, 2.0), (ts, 3.0), (ts + 60.0, 4.0)]
    series = _replay(spec, [[s] for s in samples], exact=True)
    assert series.whole is not None


def test_a_spec_panes_cannot_cut_is_kept_window_by_window() -> None:
    series = p.fresh(w.hopping(7, 2))
    assert series.whole is not None and p.panes_per_window(series.spec) == 0
    assert p.panes_per_window(w.hopping(60, 10)) == 6


def test_a_table_value_of_windows_starts_the_workload_over() -> None:
    """A table value written before panes (series of `governor.windows`) does not decode: the
    core restores the workload empty (its series start afresh) instead of failing."""
    from governor import events
    from governor.cores.aggregator import AggregatorCore, WindowSettings, WorkloadSamples

    core = AggregatorCore(WindowSettings())
    stable, panic = core.stable_spec, core.panic_spec
    old_stable, _, _ = w.ingest_many(w.SeriesWindows(spec=stable), [(1000.0, 1.0), (1001.0, 2.0)])
    old_panic, _, _ = w.ingest_many(w.SeriesWindows(spec=panic), [(1000.0, 1.0), (1001.0, 2.0)])
    stored = msgspec.msgpack.encode({"rps": [7, old_stable, old_panic]})
    workload = "ns/Deployment/web"
    assert core.restore(workload, stored) is False
    assert core.live[workload] == {}
    sample = events.MetricSample(workload=workload, metric="rps", value=3.0, timestamp=1002.0)
    [window] = core.on(WorkloadSamples(workload, [(8, sample)], now=0.0)).records
    assert isinstance(window, events.LoadWindow) and window.count == 1
