"""The aggregator's core: samples in, window state and load windows out, with no I/O.

Per (workload, metric) a series holds a stable and a panic hopping window (`governor.windows`,
the code the simulator runs) and the last source offset folded into them. `on(samples)` folds
one workload's samples of a batch; `tick(now)` sends the series held back by the throttle:

- **dedup**: a sample at or below its series' offset was folded already (a redelivery after a
  crash or a rebalance) and is counted `duplicate`, not folded again: at-least-once delivery,
  exactly-once windows (one workload lives in one partition, so its offsets only grow);
- **windows**: the fresh samples go into both windows at once; a per-pod series also keeps its
  pods' instants (`governor.pod_totals`);
- **throttling**: a series goes out at once when a window closed (the closed ones and the open
  windows' estimates, in one `LoadWindow` with `more`), else at most every `interval_s`, and
  never with the same estimates twice; what was held back goes out on the next `tick`.

`on` and `tick` return load windows (`Outputs.records`). `checkpoint()` returns the table value
(`StateWrite`: the shell writes it to the table, whose changelog is the checkpoint) of each
workload changed since the last one, once however many batches changed it: a workload's value
is ~2.5 KB, and written per batch (one sample a second) it was ~25 MB/s of changelog at 10,000
workloads, which held the load windows back behind it in the producer. The shell checkpoints
before it lets the source offsets of what was folded be committed. The state of
a workload the core does not hold comes from the table through `restore`; after a rebalance
`revoked` drops everything held, and the table is the truth again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import msgspec

from governor import events
from governor.cores import Outputs
from governor.events import WindowKind
from governor.metric_records import Partitions
from governor.pod_totals import PodTotals, add_samples, pod_sample, with_totals
from governor.windows import (
    SeriesWindows,
    WindowAcc,
    WindowSpec,
    estimate,
    hopping,
    ingest_into,
    to_load_window,
    to_window_view,
)

__all__ = [
    "AggregatorCore",
    "MetricWindows",
    "StateWrite",
    "WindowSettings",
    "WorkloadSamples",
    "WorkloadWindows",
    "estimates",
    "load_message",
    "signature",
]


class MetricWindows(msgspec.Struct, array_like=True):
    """The windows of one (workload, metric) and the last source offset applied to them.

    `offset` makes reprocessing idempotent: after a rebalance or a crash the new owner restores
    this value from the changelog and skips every record at or below it."""

    offset: int
    stable: SeriesWindows
    panic: SeriesWindows
    totals: PodTotals | None = None  # a per-pod series' instants (governor.pod_totals)


# The table value of one workload: its series by metric.
WorkloadWindows = dict[str, MetricWindows]

SeriesKey = tuple[str, str]  # (workload, metric)


class WindowSettings(msgspec.Struct, kw_only=True):
    """The windows and the throttle (the aggregator's settings extend them)."""

    stable_window_seconds: float = 60.0
    stable_hop_seconds: float = 10.0
    panic_window_seconds: float = 6.0
    panic_hop_seconds: float = 2.0
    allowed_lateness_seconds: float = 2.0
    publish_interval_ms: int = 500
    instant_seconds: float = 1.0  # a per-pod series' instants (governor.pod_totals): the scrape


class WorkloadSamples(msgspec.Struct, frozen=True):
    """The record of `on`: one workload's samples of a batch, each with its source offset, in
    offset order; `now` is the shell's monotonic clock (the throttle's)."""

    workload: str
    items: list[tuple[int, events.MetricSample]]
    now: float


class StateWrite(msgspec.Struct, frozen=True):
    """A checkpoint: the encoded table value (`WorkloadWindows`) of the workload `key`."""

    key: bytes
    value: bytes


Emitted = StateWrite | events.LoadWindow

_STATE_ENC = msgspec.msgpack.Encoder()
_STATE_DEC = msgspec.msgpack.Decoder(WorkloadWindows)


def estimates(state: MetricWindows) -> list[tuple[WindowKind, WindowAcc]]:
    """The open windows' running values of one series (those that have samples)."""
    out: list[tuple[WindowKind, WindowAcc]] = []
    for kind, series in (("stable", state.stable), ("panic", state.panic)):
        if series.newest is None:  # no sample yet: no window has a count
            continue
        acc = estimate(series, series.newest)
        if acc is not None:
            out.append((kind, acc))  # type: ignore[arg-type]
    return out


def load_message(
    workload: str,
    metric: str,
    closed: Iterable[tuple[WindowKind, WindowAcc]],
    open_: Iterable[tuple[WindowKind, WindowAcc]],
    totals: PodTotals | None = None,
) -> events.LoadWindow | None:
    """One message for a series: the windows that closed, then the open windows' estimates."""
    accs = [(k, a, True) for k, a in closed] + [(k, a, False) for k, a in open_]
    if not accs:
        return None
    # The first window as the message itself, the others built as WindowViews directly (a copy
    # of each through a dict of its fields was a tenth of the aggregator's time).
    (kind, acc, is_closed), rest = accs[0], accs[1:]
    first = with_totals(to_load_window(acc, workload, metric, kind, closed=is_closed), totals)
    more = [to_window_view(a, k, closed=c) for k, a, c in rest]
    if totals is not None:
        more = [with_totals(v, totals) for v in more]
    first.more = more
    return first


def signature(opened: list[tuple[WindowKind, WindowAcc]]) -> tuple[tuple[float, int], ...]:
    """What an estimate is compared by: an unchanged one is not sent again."""
    return tuple((a.start, a.count) for _, a in opened)


class AggregatorCore:
    """The windows of the workloads of this worker's partitions, and the throttle's memory."""

    def __init__(self, s: WindowSettings) -> None:
        lateness = s.allowed_lateness_seconds
        self.stable_spec: WindowSpec = hopping(
            s.stable_window_seconds, s.stable_hop_seconds, lateness
        )
        self.panic_spec: WindowSpec = hopping(s.panic_window_seconds, s.panic_hop_seconds, lateness)
        self.interval_s = s.publish_interval_ms / 1000.0
        self.no_totals = PodTotals(s.instant_seconds, s.stable_window_seconds + lateness)
        self.live: dict[str, WorkloadWindows] = {}
        # Per series: when it was last published (monotonic) and the estimates it carried, so
        # an unchanged estimate is not sent again and a series goes out at most every interval.
        self.published_at: dict[SeriesKey, float] = {}
        self.published: dict[SeriesKey, tuple[tuple[float, int], ...]] = {}
        self.dirty: dict[SeriesKey, MetricWindows] = {}
        # Workloads changed since the last `checkpoint`, in the order they changed.
        self.unwritten: dict[str, None] = {}
        # Samples by outcome (ok, late, duplicate) since the shell last took them (`take_counts`).
        self.counts: dict[str, int] = {}

    # --- the state held ----------------------------------------------------------------------

    def holds(self, workload: str) -> bool:
        return workload in self.live

    def restore(self, workload: str, stored: bytes | None) -> bool:
        """Hold `workload`'s table value (None: none yet). False if it was unreadable (another
        version's value): the series then start over."""
        state: WorkloadWindows = {}
        readable = True
        if stored is not None:
            try:
                state = _STATE_DEC.decode(stored)
            except msgspec.DecodeError:
                readable = False
        self.live[workload] = state
        return readable

    def revoked(self) -> None:
        """Partitions moved: nothing held is current; the table (restored) is the truth."""
        self.live.clear()
        self.dirty.clear()
        self.unwritten.clear()

    def resume_offsets(self, parts: Partitions) -> dict[int, int]:
        """Per metrics partition the offset after the newest record folded into the workloads
        held (restore every table key first). One workload lives in one partition and a source
        offset is committed only after the table write that folded it, so a partition's
        re-fetch starts at or before this; a partition with nothing folded is absent."""
        newest: dict[int, int] = {}
        for workload, state in self.live.items():
            if state:
                p = parts.of(workload)
                newest[p] = max(newest.get(p, -1), *(m.offset for m in state.values()))
        return {p: off + 1 for p, off in newest.items() if off >= 0}

    def take_counts(self) -> dict[str, int]:
        counts, self.counts = self.counts, {}
        return counts

    # --- the core ----------------------------------------------------------------------------

    def on(self, record: WorkloadSamples) -> Outputs[Emitted]:
        """Fold one workload's samples: the series due to go out (its new table value waits for
        `checkpoint`). The shell restores the workload first if it is not held."""
        state = self.live.setdefault(record.workload, {})
        by_metric: dict[str, list[tuple[int, events.MetricSample]]] = {}
        for off, smp in record.items:
            by_metric.setdefault(smp.metric, []).append((off, smp))
        out: Outputs[Emitted] = Outputs()
        changed = False
        for metric, items in by_metric.items():
            series = state.get(metric) or self.new_series()
            fresh = [(off, smp) for off, smp in items if off > series.offset]
            self.count("duplicate", len(items) - len(fresh))
            if not fresh:
                continue
            closed, state[metric] = self.fold(series, fresh)
            changed = True
            out.records += self.due(record.workload, metric, state[metric], closed, record.now)
        if changed:
            self.unwritten[record.workload] = None
        return out

    def checkpoint(self) -> Outputs[Emitted]:
        """The table value of every workload changed since the last checkpoint."""
        unwritten, self.unwritten = self.unwritten, {}
        out: Outputs[Emitted] = Outputs()
        live = self.live
        out.checkpoints = [StateWrite(w.encode(), _STATE_ENC.encode(live[w])) for w in unwritten]
        return out

    def tick(self, now: float) -> Outputs[Emitted]:
        """The series held back by the throttle since the last tick, unless unchanged."""
        pending, self.dirty = self.dirty, {}
        out: Outputs[Emitted] = Outputs()
        for key, series in pending.items():
            out.records += self.publish(key, series, [], now)
        return out

    def new_series(self) -> MetricWindows:
        return MetricWindows(
            -1, SeriesWindows(spec=self.stable_spec), SeriesWindows(spec=self.panic_spec)
        )

    def fold(
        self, series: MetricWindows, fresh: list[tuple[int, events.MetricSample]]
    ) -> tuple[list[tuple[WindowKind, WindowAcc]], MetricWindows]:
        """The windows that closed, and the series with the fresh samples in."""
        # In place (`ingest_into`): the state held is decoded from the table and nobody else
        # holds it; a copy of every window's values per sample was most of the fold's cost.
        pairs = [(smp.timestamp, smp.value) for _, smp in fresh]
        closed_stable, late = ingest_into(series.stable, pairs)
        closed_panic, _ = ingest_into(series.panic, pairs)
        pods = [p for _, m in fresh if (p := pod_sample(m)) is not None]
        if pods:
            series.totals = add_samples(series.totals or self.no_totals, pods)
        series.offset = fresh[-1][0]
        self.count("late", late)
        self.count("ok", len(pairs) - late)
        closed: list[tuple[WindowKind, WindowAcc]] = [("stable", a) for a in closed_stable]
        closed += [("panic", a) for a in closed_panic]
        return closed, series

    def due(
        self,
        workload: str,
        metric: str,
        series: MetricWindows,
        closed: list[tuple[WindowKind, WindowAcc]],
        now: float,
    ) -> list[events.LoadWindow]:
        """A window closed: out now, with the estimates. Else the estimates, unless this series
        went out less than an interval ago (then `tick` sends them)."""
        key = (workload, metric)
        if closed or now - self.published_at.get(key, -math.inf) >= self.interval_s:
            self.dirty.pop(key, None)
            return self.publish(key, series, closed, now)
        self.dirty[key] = series
        return []

    def publish(
        self,
        key: SeriesKey,
        series: MetricWindows,
        closed: list[tuple[WindowKind, WindowAcc]],
        now: float,
    ) -> list[events.LoadWindow]:
        opened = estimates(series)
        sig = signature(opened)
        if not closed and sig == self.published.get(key):
            return []
        window = load_message(key[0], key[1], closed, opened, series.totals)
        self.published[key] = sig
        self.published_at[key] = now
        return [] if window is None else [window]

    def count(self, outcome: str, n: int) -> None:
        if n > 0:
            self.counts[outcome] = self.counts.get(outcome, 0) + n
