"""Windowed aggregation of one metric series over event time: pure functions and table values.

The aggregator service (faust) and the simulator run this same code, so a replayed trace sees the
windows production would see.

Windows
    A series has one `WindowSpec`: windows of `size` seconds starting at every multiple of `hop`
    (epoch-aligned, so every partition owner and the simulator agree on the boundaries).
    `hop == size` is a tumbling window; `hop < size` a hopping one, where each sample belongs to
    ceil(size/hop) windows. A window covers [start, end): a sample at exactly `end` belongs to the
    next one.

Lateness (the rule)
    The watermark of a series is `newest event time seen - allowed_lateness`, raised further by
    `advance` when the caller knows time has moved on without samples (processing-time ticks for an
    idle source). A window is closed, final and emitted once `end <= watermark`. A sample is added
    to every window containing it that is not closed; a window that is already closed never changes,
    so the sample is dropped from it and counted in `SeriesWindows.late` (once per sample, however
    many of its windows refused it). Nothing is re-opened: downstream consumers may rely on a closed
    `LoadWindow` being final.

Statistics
    count, mean (sum/count), max, p95 and the newest sample's event time. p95 is the nearest-rank
    95th percentile, sorted[ceil(0.95 n) - 1], computed exactly from the window's sorted values
    while a window holds at most `max_samples` samples (default 3600: an hour at 1 sample/s).
    Past that, the retained list is thinned deterministically (every other sorted value is
    dropped and only every `stride`-th later sample kept), so memory stays bounded and p95
    becomes an approximation; count, mean, max and newest stay exact.

Entry points: `ingest` (one sample), `ingest_many` (a batch, in order), `ingest_run` (n equal
samples at a fixed spacing: a held gauge, folded in per window rather than per sample), `advance`
(close by a watermark from processing time), `estimate` (the open window's running value at
`now`), `to_load_window` (the wire type) and `statistic` (the number a policy scales on).

Everything here is a value: functions return new `WindowAcc`/`SeriesWindows` and never mutate their
arguments, so a faust table can store them as they are (msgspec-encodable, array_like). The one
exception is `ingest_into`, `ingest_many` in place for the owner of a series (the aggregator's
core, whose state is decoded from its table and never shared).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
from bisect import insort
from collections.abc import Iterable, Sequence
from typing import Literal

import msgspec

from governor.events import LoadWindow, WindowKind, WindowView

Aggregation = Literal["mean", "max", "p95"]

DEFAULT_MAX_SAMPLES = 3600


class WindowSpec(msgspec.Struct, frozen=True, omit_defaults=True):
    size: float
    hop: float
    allowed_lateness: float = 0.0
    max_samples: int = DEFAULT_MAX_SAMPLES

    def __post_init__(self) -> None:
        if not (self.size > 0 and 0 < self.hop <= self.size):
            raise ValueError(f"need 0 < hop <= size, got size={self.size} hop={self.hop}")
        if self.allowed_lateness < 0:
            raise ValueError(f"allowed_lateness must be >= 0, got {self.allowed_lateness}")
        if self.max_samples < 2:
            raise ValueError(f"max_samples must be >= 2, got {self.max_samples}")


def tumbling(size: float, allowed_lateness: float = 0.0) -> WindowSpec:
    return WindowSpec(size=size, hop=size, allowed_lateness=allowed_lateness)


def hopping(size: float, hop: float, allowed_lateness: float = 0.0) -> WindowSpec:
    return WindowSpec(size=size, hop=hop, allowed_lateness=allowed_lateness)


class WindowAcc(msgspec.Struct, array_like=True, omit_defaults=True):
    """The running aggregate of one window. `values` is sorted (for p95)."""

    start: float
    end: float
    count: int = 0
    sum: float = 0.0
    max: float = 0.0  # meaningful only when count > 0
    newest: float = 0.0  # event time of the newest sample; meaningful only when count > 0
    values: list[float] = msgspec.field(default_factory=list)
    stride: int = 1  # keep every stride-th sample in `values` (1 until max_samples is exceeded)

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else 0.0

    @property
    def p95(self) -> float:
        return nearest_rank(self.values, 0.95)


class SeriesWindows(msgspec.Struct, array_like=True, omit_defaults=True):
    """The open windows of one (workload, metric, window kind), oldest first, and its watermark."""

    spec: WindowSpec
    open: list[WindowAcc] = msgspec.field(default_factory=list)
    watermark: float | None = None
    newest: float | None = None
    late: int = 0  # samples refused by at least one closed window, since the series began


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank q-quantile of already sorted values (0.0 for none)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def window_starts(ts: float, spec: WindowSpec) -> list[float]:
    """Starts of every window containing `ts`, oldest first."""
    last = math.floor(ts / spec.hop)
    out: list[float] = []
    k = last
    while k * spec.hop + spec.size > ts:
        out.append(k * spec.hop)
        k -= 1
    out.reverse()
    return out


def add_sample(acc: WindowAcc, value: float, ts: float, max_samples: int) -> WindowAcc:
    """A new accumulator with the sample added."""
    new = msgspec.structs.replace(acc, values=list(acc.values))
    _add_in_place(new, value, ts, max_samples)
    return new


def _add_in_place(acc: WindowAcc, value: float, ts: float, max_samples: int) -> None:
    first = acc.count == 0
    acc.count += 1
    acc.sum += value
    acc.max = value if first else max(acc.max, value)
    acc.newest = ts if first else max(acc.newest, ts)
    if (acc.count - 1) % acc.stride:
        return
    bisect.insort(acc.values, value)
    if len(acc.values) > max_samples:
        # Halve the retained values and the rate at which new ones are retained: each retained
        # value then stands for `stride` samples, which keeps quantiles roughly where they were.
        acc.values = acc.values[1::2]
        acc.stride *= 2


def ingest(
    series: SeriesWindows, value: float, ts: float
) -> tuple[SeriesWindows, list[WindowAcc], int]:
    """Add one sample: (the new series, windows this closed, 1 if the sample was late else 0).

    Equal to `ingest_many` of that one sample, without its routing tables: at a sample per
    second and series this is the aggregator's whole fold (about half the cost of the batch
    path for one sample)."""
    spec = series.spec
    size, hop = spec.size, spec.hop
    watermark = series.watermark
    wanted: list[float] = []  # the starts of the windows containing ts that are not closed
    was_late = 0
    k = math.floor(ts / hop)
    start = k * hop
    while start + size > ts:
        if watermark is not None and start + size <= watermark:
            was_late = 1
        else:
            wanted.append(start)
        k -= 1
        start = k * hop
    todo = set(wanted)
    still: list[WindowAcc] = []
    for acc in series.open:
        if acc.start in todo:
            todo.discard(acc.start)
            acc = _fold_one(acc, ts, value, spec)
        still.append(acc)
    if todo:  # windows that open with this sample
        still += [_fold_one(WindowAcc(start=t, end=t + size), ts, value, spec) for t in todo]
        still.sort(key=_START)
    newest = ts if series.newest is None or ts > series.newest else series.newest
    candidate = newest - spec.allowed_lateness
    if watermark is None or candidate > watermark:
        watermark = candidate
    n = _closed_count(still, watermark)
    closed, still = still[:n], still[n:]
    new = msgspec.structs.replace(
        series, open=still, watermark=watermark, newest=newest, late=series.late + was_late
    )
    return new, closed, was_late


def ingest_many(
    series: SeriesWindows, samples: Iterable[tuple[float, float]]
) -> tuple[SeriesWindows, list[WindowAcc], int]:
    """Add (timestamp, value) samples in the given order; same result as ingesting one by one.

    Returns the new series, the windows that closed (oldest first) and how many samples were late.
    """
    if isinstance(samples, (list, tuple)) and len(samples) == 1:
        ts, value = samples[0]
        return ingest(series, value, ts)
    spec = series.spec
    size, hop = spec.size, spec.hop
    # Samples are routed to their windows first and folded in per window afterwards: the fold
    # then runs over plain lists, which is what keeps a month of per-second replay fast.
    routed: dict[float, tuple[list[float], list[float]]] = {}
    watermark, newest, late = series.watermark, series.newest, 0
    for ts, value in samples:
        was_late = False
        k = math.floor(ts / hop)
        start = k * hop
        while start + size > ts:
            if watermark is not None and start + size <= watermark:
                was_late = True
            else:
                lists = routed.get(start)
                if lists is None:
                    lists = routed[start] = ([], [])
                lists[0].append(ts)
                lists[1].append(value)
            k -= 1
            start = k * hop
        late += was_late
        if newest is None or ts > newest:
            newest = ts
        candidate = newest - spec.allowed_lateness
        if watermark is None or candidate > watermark:
            watermark = candidate
    by_start = {acc.start: acc for acc in series.open}
    known = len(by_start)
    for start, (times, values) in routed.items():
        old = by_start.get(start)
        by_start[start] = _fold(
            old or WindowAcc(start=start, end=start + size), times, values, spec
        )
    return _merged(series, by_start, known, newest, watermark, late)


def ingest_into(
    series: SeriesWindows, samples: Iterable[tuple[float, float]]
) -> tuple[list[WindowAcc], int]:
    """`ingest_many` in place, for a caller that owns `series` and its windows (the aggregator's
    decoded state, which nobody else holds): the same series afterwards, the same closed windows
    and late count, without a copy of every window's sorted values per sample. At a sample a
    second the copies (nine windows of up to 60 values) were two thirds of the aggregator's time.
    The closed windows are handed over (no longer in `series`)."""
    if not isinstance(samples, (list, tuple)) or len(samples) != 1:
        return _ingest_routed_into(series, samples)
    ((ts, value),) = samples
    open_, watermark, newest = series.open, series.watermark, series.newest
    if open_ and newest is not None and ts >= newest and (watermark is None or ts >= watermark):
        return _in_order_into(series, ts, value), 0
    spec = series.spec
    size, hop, cap = spec.size, spec.hop, spec.max_samples
    opened: list[WindowAcc] = []
    refused = -math.inf if watermark is None else watermark  # a window ending at or before it
    late = 0
    k = math.floor(ts / hop)
    start = k * hop
    end = start + size
    # The windows of ts come newest first and `open_` is oldest first: one walk back through
    # it finds them (a dict of the open windows per call was a tenth of the fold).
    j = len(open_) - 1
    while end > ts:
        if end <= refused:
            late = 1
        else:
            while j >= 0 and open_[j].start > start:
                j -= 1
            if j >= 0 and open_[j].start == start:
                # Out of order or late: rare (a source in order takes `_in_order_into`).
                _add_in_place(open_[j], value, ts, cap)
            else:  # cap >= 2: one value is never thinned
                opened.append(WindowAcc(start, end, 1, 0.0 + value, value, ts, [value]))
        k -= 1
        start = k * hop
        end = start + size
    if newest is None or ts > newest:
        newest = ts
    candidate = newest - spec.allowed_lateness
    if watermark is None or candidate > watermark:
        watermark = candidate
    if opened:  # windows that opened with this sample
        open_ = sorted(open_ + opened, key=_START)
    closed: list[WindowAcc] = []
    if watermark is not None:
        n = _closed_count(open_, watermark)
        if n:  # (no copy of the open list when nothing closed)
            closed, open_ = open_[:n], open_[n:]
    series.open = open_
    series.watermark = watermark
    series.newest = newest
    series.late += late
    return closed, late


def _in_order_into(series: SeriesWindows, ts: float, value: float) -> list[WindowAcc]:
    """`ingest_into` of one sample at or after the series' newest and not behind its watermark
    (a source in order: nearly every sample): the windows it closed. It is never late, and the
    open windows containing it are the newest ones with `end > ts`: each starts at or before an
    earlier sample, and one containing `ts` that starts by the newest open one holds that one's
    first sample, so it was opened, and it ends after the watermark. Only windows after the
    newest open one are new (once per hop). So one walk back from the newest, without finding
    each window's start again (the general path's walk was most of the aggregator's fold)."""
    spec = series.spec
    size, hop, cap = spec.size, spec.hop, spec.max_samples
    open_ = series.open
    for acc in reversed(open_):
        if acc.end <= ts:
            break
        # An open window has a sample (count >= 1) and none newer than `ts`.
        acc.newest = ts
        if value > acc.max:
            acc.max = value
        count = acc.count = acc.count + 1
        acc.sum += value
        if acc.stride == 1 or not (count - 1) % acc.stride:
            insort(acc.values, value)
            if len(acc.values) > cap:
                acc.values = acc.values[1::2]
                acc.stride *= 2
    newest_start = open_[-1].start
    k = math.floor(ts / hop)
    start = k * hop
    if start > newest_start:  # windows that open with this sample, newest first
        opened: list[WindowAcc] = []
        while start > newest_start and start + size > ts:
            opened.append(WindowAcc(start, start + size, 1, 0.0 + value, value, ts, [value]))
            k -= 1
            start = k * hop
        opened.reverse()
        open_ += opened
    series.newest = ts
    candidate = ts - spec.allowed_lateness
    watermark = series.watermark
    if watermark is None or candidate > watermark:
        watermark = series.watermark = candidate
    if open_[0].end > watermark:
        return []
    n = _closed_count(open_, watermark)
    series.open = open_[n:]
    return open_[:n]


def _ingest_routed_into(
    series: SeriesWindows, samples: Iterable[tuple[float, float]]
) -> tuple[list[WindowAcc], int]:
    """`ingest_into` of several samples: routed per window first, as `ingest_many` does, then
    folded into each window at once (one sort per window, not an insort per sample: a backlog
    drain gives each workload many samples per batch)."""
    merged, closed, late = ingest_many(series, samples)
    series.open, series.watermark = merged.open, merged.watermark
    series.newest, series.late = merged.newest, merged.late
    return closed, late


def ingest_run(
    series: SeriesWindows, first: float, n: int, value: float, spacing: float = 1.0
) -> tuple[SeriesWindows, list[WindowAcc], int]:
    """Add n samples of one value at first, first + spacing, ...: equal to `ingest_many` of them.

    A gauge scraped at a fixed rate produces such runs whenever its value holds; the simulator
    replays months of per-second samples through this in time proportional to the windows, not
    the samples.
    """
    if n <= 0:
        return series, [], 0
    spec = series.spec
    size, hop = spec.size, spec.hop
    wm0 = series.watermark
    times = [first + i * spacing for i in range(n)]
    # In order, each sample lies at or after every earlier one, so only the watermark from before
    # the run can refuse it: late samples are those whose oldest window already closed.
    late = 0
    if wm0 is not None:
        for ts in times:
            oldest = (math.floor(ts / hop) - math.ceil(size / hop)) * hop
            while oldest + size <= ts:
                oldest += hop
            if oldest + size > wm0:
                break
            late += 1
    routed: dict[float, list[float]] = {}
    k = math.floor(first / hop) - math.ceil(size / hop)
    last_k = math.floor(times[-1] / hop)
    while k <= last_k:
        start = k * hop
        k += 1
        end = start + size
        if wm0 is not None and end <= wm0:
            continue
        lo = bisect.bisect_left(times, start)
        hi = bisect.bisect_left(times, end)
        if hi > lo:
            routed[start] = times[lo:hi]
    by_start = {acc.start: acc for acc in series.open}
    known = len(by_start)
    for start, stamps in routed.items():
        old = by_start.get(start) or WindowAcc(start=start, end=start + size)
        by_start[start] = _fold_run(old, stamps, value, spec)
    newest = times[-1] if series.newest is None else max(series.newest, times[-1])
    candidate = newest - spec.allowed_lateness
    watermark = candidate if wm0 is None else max(wm0, candidate)
    return _merged(series, by_start, known, newest, watermark, late)


def _merged(
    series: SeriesWindows,
    by_start: dict[float, WindowAcc],
    known: int,
    newest: float | None,
    watermark: float | None,
    late: int,
) -> tuple[SeriesWindows, list[WindowAcc], int]:
    """`series` with its open windows replaced by `by_start`'s (`known` of them were open
    before), advanced to `watermark`: the new series, the windows that closed and `late`."""
    # Open windows are kept oldest first; usually every sample fell into windows already open,
    # and their order stands.
    if len(by_start) == known:
        still = [by_start[acc.start] for acc in series.open]
    else:
        still = sorted(by_start.values(), key=_START)
    merged = msgspec.structs.replace(series, open=still, newest=newest, late=series.late + late)
    advanced, closed, _ = advance(merged, watermark)
    return advanced, closed, late


_START = operator.attrgetter("start")
_END = operator.attrgetter("end")


def _closed_count(open_: list[WindowAcc], watermark: float) -> int:
    """How many of a series' open windows a watermark closes (`end <= watermark`). They are a
    prefix: a series' windows share one size and are kept oldest first, so their ends ascend,
    and a bisection reads a few of them where two scans read all (at 10,000 workloads the
    scans were a tenth of py-spy's samples in `_in_order_into`)."""
    return bisect.bisect_right(open_, watermark, key=_END)


def _fold(acc: WindowAcc, times: list[float], values: list[float], spec: WindowSpec) -> WindowAcc:
    """A new accumulator with the samples added in order (equal to adding them one by one)."""
    if acc.stride != 1 or len(acc.values) + len(values) > spec.max_samples:
        new = msgspec.structs.replace(acc, values=list(acc.values))
        for ts, value in zip(times, values, strict=True):
            _add_in_place(new, value, ts, spec.max_samples)
        return new
    if len(values) == 1:  # the common case at a sample per second and series
        return _fold_one(acc, times[0], values[0], spec)
    total = functools.reduce(operator.add, values, acc.sum)  # left to right, as one by one
    top, last = max(values), max(times)
    return msgspec.structs.replace(
        acc,
        count=acc.count + len(values),
        sum=total,
        max=top if acc.count == 0 else max(acc.max, top),
        newest=last if acc.count == 0 else max(acc.newest, last),
        values=sorted(acc.values + values),
    )


def _fold_run(acc: WindowAcc, times: list[float], value: float, spec: WindowSpec) -> WindowAcc:
    """`_fold` of len(times) samples of one value: the sorted values take the run in one slice
    after their equals (where a stable sort puts it) instead of being sorted again."""
    n = len(times)
    if n == 1 or acc.stride != 1 or len(acc.values) + n > spec.max_samples:
        return _fold(acc, times, [value] * n, spec)
    kept = acc.values
    at = bisect.bisect_right(kept, value)
    last = max(times)
    return msgspec.structs.replace(
        acc,
        count=acc.count + n,
        sum=functools.reduce(operator.add, itertools.repeat(value, n), acc.sum),
        max=value if acc.count == 0 else max(acc.max, value),
        newest=last if acc.count == 0 else max(acc.newest, last),
        values=[*kept[:at], *itertools.repeat(value, n), *kept[at:]],
    )


def _fold_one(acc: WindowAcc, ts: float, value: float, spec: WindowSpec) -> WindowAcc:
    """A new accumulator with one sample added."""
    if acc.stride != 1 or len(acc.values) + 1 > spec.max_samples:
        return add_sample(acc, value, ts, spec.max_samples)
    kept = acc.values.copy()
    bisect.insort(kept, value)
    first = acc.count == 0
    return msgspec.structs.replace(
        acc,
        count=acc.count + 1,
        sum=acc.sum + value,
        max=value if first else max(acc.max, value),
        newest=ts if first else max(acc.newest, ts),
        values=kept,
    )


def advance(
    series: SeriesWindows, watermark: float | None
) -> tuple[SeriesWindows, list[WindowAcc], int]:
    """Raise the watermark (never lowers it) and close every window with end <= watermark.

    Returns the new series, the closed windows (oldest first) and 0 (no sample was late), so it
    has the same shape as `ingest`.
    """
    if watermark is None or (series.watermark is not None and watermark < series.watermark):
        watermark = series.watermark
    if watermark is None:
        return series, [], 0
    n = _closed_count(series.open, watermark)
    if not n and watermark == series.watermark:
        return series, [], 0
    closed, still_open = series.open[:n], series.open[n:]
    return msgspec.structs.replace(series, open=still_open, watermark=watermark), closed, 0


def estimate(series: SeriesWindows, now: float) -> WindowAcc | None:
    """The open window's running value at `now`: of the windows containing `now`, the one that has
    been open longest (it covers the most of the recent past). None if it has no samples yet."""
    for a in series.open:  # oldest first: the first one is the answer
        if a.start <= now < a.end and a.count > 0:
            return a
    return None


def to_load_window(
    acc: WindowAcc, workload: str, metric: str, window: WindowKind, *, closed: bool
) -> LoadWindow:
    return LoadWindow(
        workload=workload,
        metric=metric,
        window=window,
        start=acc.start,
        end=acc.end,
        count=acc.count,
        mean=acc.mean,
        max=acc.max if acc.count else 0.0,
        p95=acc.p95,
        newest_sample=acc.newest if acc.count else acc.start,
        closed=closed,
    )


def to_window_view(acc: WindowAcc, window: WindowKind, *, closed: bool) -> WindowView:
    """`to_load_window` without the series' names: one of a load message's `more`."""
    counted = acc.count > 0
    return WindowView(
        window=window,
        start=acc.start,
        end=acc.end,
        count=acc.count,
        mean=acc.sum / acc.count if counted else 0.0,
        max=acc.max if counted else 0.0,
        p95=acc.p95,
        newest_sample=acc.newest if counted else acc.start,
        closed=closed,
    )


def statistic(window: WindowView, aggregation: Aggregation) -> float | None:
    """The number a policy scales on: the window's mean, max or p95 (None for an empty window)."""
    if window.count == 0:
        return None
    if aggregation == "mean":
        return window.mean
    if aggregation == "max":
        return window.max
    return window.p95


def views(window: LoadWindow) -> list[LoadWindow]:
    """Every window a load message carries (itself, then `more`), each as a LoadWindow."""
    if not window.more:
        return [window]
    first = msgspec.structs.replace(window, more=[])
    return [first] + [
        LoadWindow(
            workload=window.workload,
            metric=window.metric,
            **{f: getattr(v, f) for f in WindowView.__struct_fields__},
        )
        for v in window.more
    ]
