from __future__ import annotations

import math

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governor import windows as w
from governor.events import LoadWindow


def _p95(values: list[float]) -> float:
    # Nearest rank, written out independently of governor.windows.
    ordered = sorted(values)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


def _run(spec: w.WindowSpec, samples: list[tuple[float, float]]) -> list[w.WindowAcc]:
    """Ingest one by one, then flush with a far watermark: every window, closed, oldest first."""
    series = w.SeriesWindows(spec=spec)
    out: list[w.WindowAcc] = []
    for ts, value in samples:
        series, closed, _ = w.ingest(series, value, ts)
        out.extend(closed)
    series, closed, _ = w.advance(series, 1e12)
    out.extend(closed)
    assert series.open == []
    return out


def test_window_starts_tumbling_and_hopping() -> None:
    assert w.window_starts(14.0, w.tumbling(15)) == [0.0]
    assert w.window_starts(15.0, w.tumbling(15)) == [15.0]  # [start, end): 15 opens the next
    assert w.window_starts(61.0, w.hopping(60, 15)) == [15.0, 30.0, 45.0, 60.0]
    assert w.window_starts(60.0, w.hopping(60, 15)) == [15.0, 30.0, 45.0, 60.0]
    assert w.window_starts(59.9, w.hopping(60, 15)) == [0.0, 15.0, 30.0, 45.0]


def test_tumbling_stats_by_hand() -> None:
    samples = [(0.0, 1.0), (1.0, 5.0), (2.0, 3.0), (10.0, 7.0), (11.0, 9.0)]
    first, second = _run(w.tumbling(10), samples)
    assert (first.start, first.end, first.count) == (0.0, 10.0, 3)
    assert first.mean == pytest.approx(3.0)
    assert first.max == 5.0
    assert first.p95 == 5.0  # ceil(0.95*3) = 3rd of [1,3,5]
    assert first.newest == 2.0
    assert (second.count, second.mean, second.max) == (2, 8.0, 9.0)


def test_a_window_closes_when_watermark_passes_its_end() -> None:
    series = w.SeriesWindows(spec=w.tumbling(10, allowed_lateness=2))
    series, closed, _ = w.ingest(series, 1.0, 3.0)
    series, closed, _ = w.ingest(series, 1.0, 11.0)
    assert closed == []  # watermark 9 < end 10
    series, closed, _ = w.ingest(series, 1.0, 12.0)
    assert [c.start for c in closed] == [0.0]  # watermark 10 == end
    assert series.watermark == 10.0


def test_late_sample_accepted_while_window_open_dropped_after() -> None:
    series = w.SeriesWindows(spec=w.tumbling(10, allowed_lateness=2))
    series, _, _ = w.ingest(series, 1.0, 5.0)
    series, _, _ = w.ingest(series, 1.0, 11.0)  # watermark 9: [0,10) still open
    series, _, late = w.ingest(series, 100.0, 8.0)  # out of order but within lateness
    assert late == 0
    series, closed, _ = w.ingest(series, 1.0, 13.0)  # watermark 11: [0,10) closes
    assert closed[0].count == 2
    assert closed[0].max == 100.0
    series, closed, late = w.ingest(series, 1000.0, 9.0)  # its window is final: dropped, counted
    assert late == 1
    assert closed == []
    assert series.late == 1
    assert all(acc.max < 1000.0 for acc in series.open)


def test_hopping_partially_late_sample_goes_to_open_windows_only() -> None:
    series = w.SeriesWindows(spec=w.hopping(20, 10))
    series, _, _ = w.ingest(series, 1.0, 25.0)  # watermark 25: [0,20) closed... (never opened)
    series, _closed, late = w.ingest(series, 7.0, 15.0)  # in [0,20) (closed) and [10,30) (open)
    assert late == 1
    (acc,) = [a for a in series.open if a.start == 10.0]
    assert acc.count == 2
    assert acc.max == 7.0
    assert not any(a.start == 0.0 for a in series.open)


def test_advance_never_lowers_the_watermark() -> None:
    series = w.SeriesWindows(spec=w.tumbling(10))
    series, _, _ = w.advance(series, 30.0)
    series, _, _ = w.advance(series, 5.0)
    assert series.watermark == 30.0


def test_functions_do_not_mutate_their_arguments() -> None:
    series = w.SeriesWindows(spec=w.hopping(10, 5))
    series, _, _ = w.ingest(series, 1.0, 1.0)
    snapshot = msgspec.json.encode(series)
    w.ingest(series, 2.0, 2.0)
    w.ingest_many(series, [(3.0, 3.0), (30.0, 1.0)])
    w.advance(series, 100.0)
    assert msgspec.json.encode(series) == snapshot


def test_series_round_trips_through_msgpack_for_a_table() -> None:
    series = w.SeriesWindows(spec=w.hopping(60, 15, allowed_lateness=2))
    series, _, _ = w.ingest_many(series, [(float(t), t * 0.5) for t in range(100)])
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(series), type=w.SeriesWindows)
    assert again == series


def test_estimate_is_the_longest_open_window_containing_now() -> None:
    series = w.SeriesWindows(spec=w.hopping(60, 15))
    series, _, _ = w.ingest_many(series, [(float(t), float(t)) for t in range(100, 130)])
    est = w.estimate(series, 130.0)
    assert est is not None
    assert est.start == 75.0  # windows containing 130: 75, 90, 105, 120
    assert est.count == 30
    assert est.mean == pytest.approx(sum(range(100, 130)) / 30)
    assert w.estimate(series, 10_000.0) is None


def test_to_load_window_and_statistic() -> None:
    acc = w.WindowAcc(start=0.0, end=10.0)
    for ts, v in [(1.0, 2.0), (2.0, 4.0), (3.0, 9.0)]:
        acc = w.add_sample(acc, v, ts, 100)
    lw = w.to_load_window(acc, "ns/Deployment/web", "load", "stable", closed=True)
    assert isinstance(lw, LoadWindow)
    assert (lw.count, lw.mean, lw.max, lw.p95, lw.newest_sample) == (3, 5.0, 9.0, 9.0, 3.0)
    assert w.statistic(lw, "mean") == 5.0
    assert w.statistic(lw, "max") == 9.0
    assert w.statistic(lw, "p95") == 9.0
    empty = w.to_load_window(w.WindowAcc(start=0, end=1), "x", "load", "panic", closed=False)
    assert w.statistic(empty, "mean") is None


def test_reservoir_is_bounded_and_keeps_count_sum_max_exact() -> None:
    spec = w.WindowSpec(size=1e6, hop=1e6, max_samples=64)
    values = [float((i * 37) % 101) for i in range(1000)]
    series, _, _ = w.ingest_many(w.SeriesWindows(spec=spec), list(enumerate(values)))
    (acc,) = series.open
    assert len(acc.values) <= 64
    assert acc.count == 1000
    assert acc.sum == pytest.approx(sum(values))
    assert acc.max == max(values)
    assert abs(acc.p95 - _p95(values)) <= 5.0  # approximate once thinned


def test_spec_validation() -> None:
    with pytest.raises(ValueError, match="hop"):
        w.WindowSpec(size=10, hop=20)
    with pytest.raises(ValueError, match="lateness"):
        w.WindowSpec(size=10, hop=5, allowed_lateness=-1)


# --- properties -------------------------------------------------------------------------------

_sizes = st.sampled_from([(10.0, 10.0), (10.0, 5.0), (6.0, 3.0), (60.0, 15.0), (7.0, 2.0)])
_samples = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=300).map(float),
        st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
    ),
    max_size=80,
)
_lateness = st.sampled_from([0.0, 2.0, 30.0])
# Any size/hop, lateness and sample cap: out-of-order, late and thinned series included.
_specs = st.builds(
    lambda size_hop, lateness, max_samples: w.WindowSpec(
        size=size_hop[0], hop=size_hop[1], allowed_lateness=lateness, max_samples=max_samples
    ),
    _sizes,
    _lateness,
    st.sampled_from([2, 5, 3600]),
)


@settings(max_examples=200, deadline=None)
@given(size_hop=_sizes, samples=_samples)
def test_in_order_windows_equal_a_direct_computation(
    size_hop: tuple[float, float], samples: list[tuple[float, float]]
) -> None:
    size, hop = size_hop
    samples = sorted(samples, key=lambda s: s[0])
    windows = _run(w.WindowSpec(size=size, hop=hop), samples)
    starts = [a.start for a in windows]
    assert starts == sorted(set(starts))  # each window once, oldest first
    for acc in windows:
        inside = [v for ts, v in samples if acc.start <= ts < acc.start + size]
        assert acc.end == acc.start + size
        assert acc.count == len(inside) > 0
        assert acc.mean == pytest.approx(sum(inside) / len(inside), rel=1e-9, abs=1e-6)
        assert acc.max == max(inside)
        assert acc.p95 == _p95(inside)
    # Every window that holds a sample was emitted.
    expected = {
        k * hop
        for ts, _ in samples
        for k in range(math.floor(ts / hop) - math.ceil(size / hop), math.floor(ts / hop) + 1)
        if k * hop <= ts < k * hop + size
    }
    assert set(starts) == expected


@settings(max_examples=200, deadline=None)
@given(
    size_hop=_sizes,
    lateness=st.sampled_from([0.0, 1.0, 5.0, 20.0]),
    samples=st.lists(st.integers(min_value=0, max_value=200).map(float), max_size=60),
)
def test_late_rule_matches_its_definition(
    size_hop: tuple[float, float], lateness: float, samples: list[float]
) -> None:
    """Replaying the documented rule by hand: a sample is late iff one of its windows has end <=
    (newest timestamp seen before it - lateness); closed windows hold exactly the accepted ones."""
    size, hop = size_hop
    spec = w.WindowSpec(size=size, hop=hop, allowed_lateness=lateness)
    series = w.SeriesWindows(spec=spec)
    accepted: dict[float, list[float]] = {}
    newest: float | None = None
    late_expected = 0
    emitted: list[w.WindowAcc] = []
    for i, ts in enumerate(samples):
        mark = None if newest is None else newest - lateness
        starts = w.window_starts(ts, spec)
        refused = [s for s in starts if mark is not None and s + size <= mark]
        late_expected += bool(refused)
        for s in starts:
            if s not in refused:
                accepted.setdefault(s, []).append(float(i))
        newest = ts if newest is None else max(newest, ts)
        series, closed, late = w.ingest(series, float(i), ts)
        assert late == bool(refused)
        emitted.extend(closed)
    series, closed, _ = w.advance(series, 1e9)
    emitted.extend(closed)
    assert series.late == late_expected
    assert {a.start: a.count for a in emitted} == {s: len(v) for s, v in accepted.items()}
    for acc in emitted:
        assert acc.max == max(accepted[acc.start])


@settings(max_examples=100, deadline=None)
@given(size_hop=_sizes, samples=_samples, cut=st.integers(min_value=0, max_value=80))
def test_ingest_many_equals_one_by_one(
    size_hop: tuple[float, float], samples: list[tuple[float, float]], cut: int
) -> None:
    spec = w.WindowSpec(size=size_hop[0], hop=size_hop[1], allowed_lateness=3.0)
    one = w.SeriesWindows(spec=spec)
    closed_one: list[w.WindowAcc] = []
    for ts, v in samples:
        one, c, _ = w.ingest(one, v, ts)
        closed_one.extend(c)
    many, c1, _ = w.ingest_many(w.SeriesWindows(spec=spec), samples[:cut])
    many, c2, _ = w.ingest_many(many, samples[cut:])
    assert many == one
    assert c1 + c2 == closed_one


@settings(max_examples=200, deadline=None)
@given(
    spec=_specs,
    before=_samples,
    ts=st.integers(min_value=0, max_value=300).map(float),
    value=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
)
def test_one_sample_fast_path_equals_the_batch_path(
    spec: w.WindowSpec, before: list[tuple[float, float]], ts: float, value: float
) -> None:
    """`ingest` (and `ingest_many` of a one-sample list) skip the batch path's routing: the same
    series, closed windows and late count as the batch path (an iterator takes it) from any
    state, out-of-order, late and thinned (max_samples) ones included."""
    series, _, _ = w.ingest_many(w.SeriesWindows(spec=spec), iter(before))
    expected = w.ingest_many(series, iter([(ts, value)]))
    assert w.ingest(series, value, ts) == expected
    assert w.ingest_many(series, [(ts, value)]) == expected


@settings(max_examples=200, deadline=None)
@given(
    size_hop=_sizes,
    lateness=_lateness,
    before=st.lists(st.integers(min_value=0, max_value=150).map(float), max_size=20),
    first=st.integers(min_value=0, max_value=200),
    n=st.integers(min_value=0, max_value=90),
    value=st.floats(min_value=-1e3, max_value=1e3, allow_nan=False),
    spacing=st.sampled_from([1.0, 2.0, 0.5]),
)
def test_ingest_run_equals_ingest_many(
    size_hop: tuple[float, float],
    lateness: float,
    before: list[float],
    first: int,
    n: int,
    value: float,
    spacing: float,
) -> None:
    spec = w.WindowSpec(size=size_hop[0], hop=size_hop[1], allowed_lateness=lateness)
    series, _, _ = w.ingest_many(w.SeriesWindows(spec=spec), [(t, t) for t in before])
    run = [(first + i * spacing, value) for i in range(n)]
    expected = w.ingest_many(series, run)
    assert w.ingest_run(series, float(first), n, value, spacing) == expected


@settings(max_examples=200, deadline=None)
@given(spec=_specs, before=_samples, after=_samples, cut=st.integers(min_value=0, max_value=80))
def test_ingest_into_equals_ingest_many(
    spec: w.WindowSpec,
    before: list[tuple[float, float]],
    after: list[tuple[float, float]],
    cut: int,
) -> None:
    """The aggregator's in-place fold: from any state (out-of-order, late and thinned ones
    included), in any split into batches, the series it leaves and what it returns are
    `ingest_many`'s, and the windows it hands over are no longer in the series."""
    start, _, _ = w.ingest_many(w.SeriesWindows(spec=spec), before)
    series, c1, l1 = w.ingest_many(start, after[:cut])
    series, c2, l2 = w.ingest_many(series, after[cut:])
    owned = msgspec.msgpack.decode(msgspec.msgpack.encode(start), type=w.SeriesWindows)
    d1, m1 = w.ingest_into(owned, after[:cut])
    d2, m2 = w.ingest_into(owned, iter(after[cut:]))
    assert owned == series
    assert (d1, m1, d2, m2) == (c1, l1, c2, l2)
    assert not {id(a) for a in d1 + d2} & {id(a) for a in owned.open}


@settings(max_examples=300, deadline=None)
@given(spec=_specs, before=_samples, after=_samples)
def test_ingest_into_one_sample_at_a_time_equals_ingest_many(
    spec: w.WindowSpec, before: list[tuple[float, float]], after: list[tuple[float, float]]
) -> None:
    """The aggregator's fold at a sample a second (one sample per call, its own path): the same
    series and windows as `ingest_many` of each sample, from any state."""
    series, _, _ = w.ingest_many(w.SeriesWindows(spec=spec), before)
    owned = msgspec.msgpack.decode(msgspec.msgpack.encode(series), type=w.SeriesWindows)
    for sample in after:
        series, closed, late = w.ingest_many(series, iter([sample]))
        assert w.ingest_into(owned, [sample]) == (closed, late)
        assert owned == series


@settings(max_examples=300, deadline=None)
@given(
    spec=_specs,
    before=_samples,
    gaps=st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.0, 1.0, 2.0, 7.0, 45.0]),
            st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
        ),
        min_size=1,
        max_size=120,
    ),
    ahead=st.sampled_from([None, 0.0, 3.0, 40.0]),
)
def test_in_order_samples_fold_as_the_general_path_does(
    spec: w.WindowSpec,
    before: list[tuple[float, float]],
    gaps: list[tuple[float, float]],
    ahead: float | None,
) -> None:
    """A source in order (each sample at or after the one before, as nearly all are) goes
    through `ingest_into`'s walk back from the newest window: from any state (out of order,
    thinned, a watermark `advance`d past the newest sample), the series and the windows it
    hands over are `ingest_many`'s."""
    series, _, _ = w.ingest_many(w.SeriesWindows(spec=spec), before)
    ts = max((t for t, _ in before), default=0.0)
    if ahead is not None:  # a processing-time tick raised the watermark past the newest sample
        series, _, _ = w.advance(series, ts + ahead)
    owned = msgspec.msgpack.decode(msgspec.msgpack.encode(series), type=w.SeriesWindows)
    for gap, value in gaps:
        ts += gap
        series, closed, late = w.ingest_many(series, iter([(ts, value)]))
        assert w.ingest_into(owned, [(ts, value)]) == (closed, late)
        assert owned == series


def test_a_steady_source_takes_the_in_order_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every sample after the first of a 1/s source (the first opens the series).
    fast, calls = w._in_order_into, []

    def counted(series: w.SeriesWindows, ts: float, value: float) -> list[w.WindowAcc]:
        calls.append(ts)
        return fast(series, ts, value)

    monkeypatch.setattr(w, "_in_order_into", counted)
    series = w.SeriesWindows(spec=w.hopping(60.0, 10.0, 2.0))
    closed = []
    for t in range(200):
        closed += w.ingest_into(series, [(1_764_000_000.0 + t, float(t % 7))])[0]
    assert len(calls) == 199
    # The windows begun before the first sample hold part of a minute, the others all of it.
    counts = [a.count for a in closed]
    assert counts == [10, 20, 30, 40, 50] + [60] * (len(counts) - 5) and len(counts) >= 13
