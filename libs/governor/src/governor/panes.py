"""The aggregator's windows kept as panes: the windows of `governor.windows`, at a fraction of
the cost per sample.

A hopping window of `size` = m * `hop` seconds is the union of m hop-sized panes, and every
sample lies in exactly one pane. So a sample is folded into its pane (count, max, newest, the
sorted values) and into the running sum of each window containing it (one float add each),
instead of into all m windows' sorted values and statistics (at the default 60 s / 10 s and
6 s / 2 s windows, nine of them). A window is built from its panes only when it is read: when
it closes, and for the open window's estimate. It is built as a `PaneWindow`, its statistics
only: the p95 needs only the largest values of each pane, not the window's values sorted.
A series' table value holds each sample once per window kind instead of m times.

The same windows (`governor.windows` is the definition)
    Window starts and ends, the watermark, which windows take a sample, the late count, when a
    window closes and which window is the estimate are computed by the same float expressions as
    `governor.windows`, so they are identical. Every sample of an open window's panes is in that
    window: a pane's sample that arrived after one of its windows closed was refused by that
    window only, and a window is built the moment the watermark passes it (within a batch too)
    and never again. So an emitted window's start, end,
    count, mean, max, p95 and newest equal `governor.windows`' (`ingest_many` over the same
    samples, in the same order) while it holds at most `max_samples` samples. The sum is kept per window in
    arrival order (not summed from the panes' sums) so the mean is the same float. Equal, not
    bit for bit: of equal values (0.0 and -0.0) a pane may keep another one as max or p95, and
    NaN values order differently.

Past max_samples (an approximation, as in `governor.windows`, but another one)
    Each pane thins itself by the `governor.windows` rule (halve its sorted values, keep only
    every `stride`-th later sample). A window whose panes are thinned, or whose merged values
    exceed max_samples, brings its panes to the largest stride (a pane of stride s keeps every
    (S/s)-th of its values), merges them and halves the result until it fits. count, sum, max and
    newest stay exact. A tumbling window is one pane: its p95 is `governor.windows`' exactly,
    thinning included.

When panes cannot be cut
    Panes need each window to be whole panes with exact float bounds: `size` a multiple of `hop`,
    both whole seconds. Any other spec (a policy's 2.5 s window hopping by 1 s), and a series
    that sees a timestamp whose pane the float division rounds (|ts| near 2**53, a denormal),
    keeps a `governor.windows.SeriesWindows` in `whole` and goes window by window as before.

Like `ingest_into` of `governor.windows`, `ingest_into` changes the series in place: for its
owner, the aggregator's core, which decodes it from its table and shares it with nobody.
"""

from __future__ import annotations

import itertools
import math
import operator
from bisect import insort
from collections.abc import Sequence

import msgspec

from governor import windows
from governor.windows import SeriesWindows, WindowAcc, WindowSpec, WindowStats, nearest_rank

__all__ = [
    "Pane",
    "PaneSeries",
    "PaneWindow",
    "estimate",
    "fresh",
    "ingest_into",
    "open_windows",
    "panes_per_window",
]


class Pane(msgspec.Struct, array_like=True, omit_defaults=True):
    """The samples of one hop: [q * hop, (q + 1) * hop). `values` is sorted (for p95)."""

    count: int = 0
    max: float = 0.0
    newest: float = 0.0
    values: list[float] = msgspec.field(default_factory=list)
    stride: int = 1  # keep every stride-th sample in `values` (1 until max_samples is exceeded)


class PaneSeries(msgspec.Struct, array_like=True, omit_defaults=True):
    """One series' windows as panes. The open windows are the keys of `sums`: window k covers
    [k * hop, k * hop + size), the panes k .. k + m - 1, and its running sum is sums[k].

    In `whole` (a spec panes cannot cut) the series is that, and the other fields are unused."""

    spec: WindowSpec
    watermark: float | None = None
    newest: float | None = None
    late: int = 0  # samples refused by at least one closed window, since the series began
    panes: dict[int, Pane] = msgspec.field(default_factory=dict)
    sums: dict[int, float] = msgspec.field(default_factory=dict)
    whole: SeriesWindows | None = None

    def __post_init__(self) -> None:
        if self.whole is None and not panes_per_window(self.spec):
            self.whole = SeriesWindows(spec=self.spec)


class PaneWindow(msgspec.Struct, frozen=True, gc=False):
    """A window built from its panes: the statistics a load message carries (`WindowStats`)."""

    start: float
    end: float
    count: int
    sum: float
    max: float
    newest: float
    p95: float

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else 0.0


def panes_per_window(spec: WindowSpec) -> int:
    """m, the panes of one window (0: panes cannot cut this spec's windows)."""
    size, hop = spec.size, spec.hop
    if size != int(size) or hop != int(hop) or size % hop or size >= 2.0**52:
        return 0
    return int(size // hop)


def fresh(spec: WindowSpec) -> PaneSeries:
    return PaneSeries(spec=spec)


def ingest_into(
    series: PaneSeries, samples: Sequence[tuple[float, float]]
) -> tuple[list[WindowStats], int]:
    """Add (timestamp, value) samples in order: the windows that closed (oldest first) and how
    many samples were late, as `governor.windows.ingest_into` returns them."""
    if series.whole is not None:
        closed, late = windows.ingest_into(series.whole, samples)
        return list(closed), late
    spec = series.spec
    size, hop = spec.size, spec.hop
    m, cap, lateness = int(size // hop), spec.max_samples, spec.allowed_lateness
    panes, sums = series.panes, series.sums
    get = sums.get
    watermark, newest, late = series.watermark, series.newest, 0
    closed: list[WindowStats] = []
    for i, (ts, value) in enumerate(samples):
        q = math.floor(ts / hop)
        lo = q - m + 1  # the oldest window containing the sample
        oldest_end = lo * hop + size
        if oldest_end <= ts or (q - m) * hop + size > ts:
            # Float rounding (|ts| near 2**53, a denormal): `governor.windows` would put this
            # sample into other windows than pane q's, so the series goes on window by window.
            series.watermark, series.newest, series.late = watermark, newest, series.late + late
            whole = series.whole = _as_whole(series)
            series.panes, series.sums = {}, {}
            rest, more = windows.ingest_into(whole, samples[i:])
            return closed + rest, late + more
        if watermark is not None and oldest_end <= watermark:
            late += 1
            while lo <= q and lo * hop + size <= watermark:  # refused by its closed windows
                lo += 1
        if lo <= q:
            pane = panes.get(q)
            if pane is None:
                pane = panes[q] = Pane(max=value, newest=ts)
            else:
                if value > pane.max:
                    pane.max = value
                if ts > pane.newest:
                    pane.newest = ts
            pane.count += 1
            if pane.stride == 1 or not (pane.count - 1) % pane.stride:
                insort(pane.values, value)
                if len(pane.values) > cap:
                    # Halve the retained values and the rate at which new ones are retained, as
                    # a window of `governor.windows` does: each value then stands for `stride`.
                    pane.values = pane.values[1::2]
                    pane.stride *= 2
            for k in range(lo, q + 1):
                sums[k] = get(k, 0.0) + value
        if newest is None or ts > newest:
            newest = ts
        candidate = newest - lateness
        if watermark is None or candidate > watermark:
            watermark = candidate
            # Built now, not after the batch: a later sample of the batch may still go into
            # one of their panes (for a newer window), never into them.
            if sums and min(sums) * hop + size <= watermark:
                closed += _close(series, watermark)
    series.watermark, series.newest, series.late = watermark, newest, series.late + late
    if closed:
        oldest = min(sums) if sums else math.inf
        for q in [q for q in panes if q < oldest]:
            del panes[q]
    return closed, late


def _close(series: PaneSeries, watermark: float) -> list[WindowStats]:
    """Take out every open window the watermark passed, built, oldest first."""
    sums = series.sums
    size, hop = series.spec.size, series.spec.hop
    done = sorted(k for k in sums if k * hop + size <= watermark)
    closed: list[WindowStats] = [_window(series, k) for k in done]
    for k in done:
        del sums[k]
    return closed


def _window(series: PaneSeries, k: int) -> PaneWindow:
    """Window k (open, or closing now) from its panes."""
    spec = series.spec
    hop, size = spec.hop, spec.size
    # C-level passes over the panes (map, attrgetter): a window is built at every publish and
    # close, and a Python loop over its panes was the larger part of the aggregator's time.
    parts = list(filter(None, map(series.panes.get, range(k, k + int(size // hop)))))
    top = max(map(_MAX, parts))
    kept = sum(map(len, map(_VALUES, parts)))
    stride = max(map(_STRIDE, parts))
    if len(parts) == 1:
        p95 = nearest_rank(parts[0].values, 0.95)
    elif stride == 1 and kept <= spec.max_samples:
        # The nearest rank counted from the top: the largest `tail` values of the window are
        # among the largest `tail` of each pane, so only those are sorted (up to 19 values the
        # p95 is the max).
        tail = kept - max(1, math.ceil(0.95 * kept)) + 1
        if tail == 1:
            p95 = top
        else:
            top_values = sorted(itertools.chain.from_iterable(p.values[-tail:] for p in parts))
            p95 = top_values[-tail]
    else:
        p95 = nearest_rank(_thinned(parts, stride, spec.max_samples)[0], 0.95)
    start = k * hop
    count = sum(map(_COUNT, parts))
    newest = max(map(_NEWEST, parts))
    return PaneWindow(start, start + size, count, series.sums[k], top, newest, p95)


_COUNT = operator.attrgetter("count")
_MAX = operator.attrgetter("max")
_NEWEST = operator.attrgetter("newest")
_STRIDE = operator.attrgetter("stride")
_VALUES = operator.attrgetter("values")


def _window_acc(series: PaneSeries, k: int) -> WindowAcc:
    """Window k with its values, as `governor.windows` holds it."""
    spec = series.spec
    get = series.panes.get
    parts = [p for q in range(k, k + int(spec.size // spec.hop)) if (p := get(q)) is not None]
    built = _window(series, k)
    stride = max(p.stride for p in parts)
    if len(parts) == 1:
        values = list(parts[0].values)
    else:
        values, stride = _thinned(parts, stride, spec.max_samples)
    return WindowAcc(
        built.start, built.end, built.count, built.sum, built.max, built.newest, values, stride
    )


def _thinned(parts: list[Pane], stride: int, cap: int) -> tuple[list[float], int]:
    """The sorted values of a window of these panes, and its stride: all of them while no pane
    is thinned and they fit in `cap`, else the module docstring's rule (every pane brought to
    the largest stride, merged, halved until they fit)."""
    runs: list[float] = []
    for p in parts:
        r = stride // p.stride
        runs += p.values[r - 1 :: r]
    runs.sort()  # concatenated sorted runs: Timsort merges them
    while len(runs) > cap:
        runs = runs[1::2]
        stride *= 2
    return runs, stride


def _estimate_index(series: PaneSeries) -> int | None:
    """The window `governor.windows.estimate` picks at the newest sample: of the open windows
    containing it, the oldest. Only the windows of the newest sample's pane can contain it (the
    check of `ingest_into` holds for it), so those are tried, oldest first."""
    newest = series.newest
    if newest is None:
        return None
    size, hop = series.spec.size, series.spec.hop
    q = math.floor(newest / hop)
    sums = series.sums
    for k in range(q - int(size // hop) + 1, q + 1):
        if k in sums:
            start = k * hop
            if start <= newest < start + size:
                return k
    return None


def estimate(series: PaneSeries) -> WindowStats | None:
    """The open window's running value at the newest sample (None: no sample yet)."""
    if series.whole is not None:
        whole = series.whole
        return None if whole.newest is None else windows.estimate(whole, whole.newest)
    k = _estimate_index(series)
    return None if k is None else _window(series, k)


def open_windows(series: PaneSeries) -> list[WindowAcc]:
    """Every open window with its values, oldest first, as `governor.windows.SeriesWindows`
    holds them."""
    if series.whole is not None:
        return list(series.whole.open)
    return [_window_acc(series, k) for k in sorted(series.sums)]


def _as_whole(series: PaneSeries) -> SeriesWindows:
    """The series window by window, for `governor.windows` to go on with."""
    return SeriesWindows(
        spec=series.spec,
        open=open_windows(series),
        watermark=series.watermark,
        newest=series.newest,
        late=series.late,
    )
