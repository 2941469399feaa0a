"""The aggregator's core: samples in, window state and load windows out, with no I/O.

Per (workload, metric) a series holds a stable and a panic hopping window (`governor.windows`,
the code the simulator runs) and the last source offset folded into them. `on(samples)` folds
one workload's samples of a batch; `tick(now)` sends the series held back by the throttle:

- **dedup**: a sample at or below its series' offset was folded already (a redelivery after a
  crash or a rebalance) and is counted `duplicate`, not folded again: at-least-once delivery,
  exactly-once windows (one workload lives in one partition, so its offsets only grow);
- **windows**: the fresh samples go into both windows at once; a per-pod series also keeps its
  pods' instants (`governor.pod_totals`). A workload's windows are the ones its policy asks for
  (`on_policy`, sized by `governor.window_sizes`, the simulator's function), else the
  defaults; a policy change starts the windows that change size afresh (`conform`);
- **throttling**: a series goes out at once when a window closed (the closed ones and the open
  windows' estimates, in one `LoadWindow` with `more`), else at most every `interval_s`, and
  never with the same estimates twice; what was held back goes out on the first `tick` after
  its interval is up, unless a window closed before. A series no window of has closed yet here
  (a new workload, or one new to this worker) has no closes to ride on: until its first, a
  sample goes out as it arrives if the last message is `START_INTERVAL_S` old (its first at
  once), so a new workload's decisions see its newest sample, not one held for the tick, at
  about the cadence its closes will keep (at most `hop + lateness + phase` seconds of it:
  under 6 s by default);
- **close phases**: a workload's windows close `close_phase` (a fixed share of the panic hop,
  from a hash of its id) after their lateness, so workloads whose sources report on one beat
  do not all close a window on the same one.

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
import zlib
from collections.abc import Iterable

import msgspec

from governor import events
from governor.cores import Outputs
from governor.events import WindowKind
from governor.metric_records import Partitions
from governor.pod_totals import PodTotals, add_samples, pod_sample, with_totals
from governor.window_sizes import WindowSettings, window_sizes
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
    "PolicyWindows",
    "StateWrite",
    "WindowSettings",
    "WorkloadSamples",
    "WorkloadWindows",
    "estimates",
    "load_message",
    "newest_offset",
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
# A workload's windows: stable, panic, and a per-pod series' empty totals.
Specs = tuple[WindowSpec, WindowSpec, PodTotals]


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


def newest_offset(value: bytes) -> int:
    """The newest source offset folded into a table value (-1: none, or unreadable): which of
    two copies of a workload's value is current (`governor.cores.state_buckets`)."""
    try:
        state = _STATE_DEC.decode(value)
    except msgspec.DecodeError:
        return -1
    return max((m.offset for m in state.values()), default=-1)


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


class PolicyWindows:
    """The policies table as the aggregator needs it: which workload each Active policy scales
    and the windows it asks for. `on` takes a record of governor.policies (None: a tombstone)
    and returns the workloads whose windows it sets (None: the defaults), for
    `AggregatorCore.on_policy`. The decider's rules: a policy of another `origin` than the
    deployment's is ignored, and a Shadow policy does not scale its workload (its windows are
    the Active policy's)."""

    def __init__(self, defaults: WindowSettings, source: events.PolicyOrigin = "file") -> None:
        self.defaults = defaults
        self.source = source
        self.workloads: dict[str, str] = {}  # policy key -> the workload it scales

    def on(self, key: str, record: events.PolicyRecord | None) -> dict[str, WindowSettings | None]:
        if record is not None and record.origin != self.source:
            return {}
        policy = record.policy if record is not None else None
        if policy is not None and policy.spec.mode == "Shadow":
            policy = None
        changes: dict[str, WindowSettings | None] = {}
        old = self.workloads.pop(key, None)
        if old is not None:
            changes[old] = None
        if policy is not None:  # after the old one: a policy that keeps its workload is a change
            self.workloads[key] = policy.workload
            changes[policy.workload] = window_sizes(policy.spec, self.defaults)
        return changes


def close_phase(workload: str, hop: float) -> float:
    """How much later than the lateness `workload`'s windows close: a fixed fraction of `hop`
    from a hash of its id (crc32: the same in every process), spread evenly over [0, hop).

    Windows are epoch-aligned and sources report on a common beat (a scrape interval, a push
    loop), so without it every series would close its window in the same second: the
    aggregators' load messages and the deciders' evaluations came as one burst of all
    workloads every panic hop, and the last of a burst waited behind the others. Spread over
    the hop, each beat closes 1/hop of them. Prometheus spreads its scrapes the same way (an
    offset per target from a hash). The boundaries do not move (the simulator's windows are
    the same ones), only when a closed one goes out; the open windows' estimates, which carry
    the newest sample, go out with every close as before."""
    return hop * (zlib.crc32(workload.encode()) / 2**32)


def phased(specs: Specs, workload: str) -> Specs:
    """`specs` with `workload`'s close phase added to both windows' lateness: one phase, below
    both hops, so a stable window still closes with a panic one (one message)."""
    stable, panic, no_totals = specs
    extra = close_phase(workload, min(stable.hop, panic.hop))
    return (
        msgspec.structs.replace(stable, allowed_lateness=stable.allowed_lateness + extra),
        msgspec.structs.replace(panic, allowed_lateness=panic.allowed_lateness + extra),
        no_totals,
    )


def respecced(series: SeriesWindows, spec: WindowSpec) -> SeriesWindows:
    """`series` on `spec`: its windows kept if only the lateness differs, else none."""
    if series.spec == spec:
        return series
    if msgspec.structs.replace(series.spec, allowed_lateness=spec.allowed_lateness) == spec:
        return msgspec.structs.replace(series, spec=spec)
    return SeriesWindows(spec=spec)


# The least spacing of a series' messages on a sample's arrival before its first closed window:
# a source of a sample a second then goes out every other sample, each as it arrives, the panic
# hop's cadence to come. Held estimates wait `interval_s` for the tick, as after a close, so the
# tick does not send a sample a second old just before the next one would go out fresh. At a
# sample per message (250 ms before 2026-12-07) 10,000 new workloads doubled the deciders' load
# for their first seconds, and the recommendations of those seconds were most of the p99.
START_INTERVAL_S = 1.5


class AggregatorCore:
    """The windows of the workloads of this worker's partitions, and the throttle's memory."""

    def __init__(self, s: WindowSettings) -> None:
        self.settings = s
        self.default = self.specs(s)
        self.stable_spec, self.panic_spec, self.no_totals = self.default
        self.interval_s = s.publish_interval_ms / 1000.0
        self.start_interval_s = min(self.interval_s, START_INTERVAL_S)
        # The workloads whose policy asks for other windows than the defaults (`on_policy`).
        self.sized: dict[str, Specs] = {}
        # Each workload's windows with its close phase (`specs_of`), until its policy changes
        # them; dropped with the workloads held (`revoked`).
        self.phases: dict[str, Specs] = {}
        self.live: dict[str, WorkloadWindows] = {}
        # Per series: when it was last published (monotonic) and the estimates it carried, so
        # an unchanged estimate is not sent again and a series goes out at most every interval.
        self.published_at: dict[SeriesKey, float] = {}
        self.published: dict[SeriesKey, tuple[tuple[float, int], ...]] = {}
        self.dirty: dict[SeriesKey, MetricWindows] = {}
        # The series a window of closed here: the others go out on arrival at most every
        # `start_interval_s`.
        self.cadenced: set[SeriesKey] = set()
        # Workloads changed since the last `checkpoint`, in the order they changed.
        self.unwritten: dict[str, None] = {}
        # Samples by outcome (ok, late, duplicate) since the shell last took them (`take_counts`).
        self.counts: dict[str, int] = {}

    # --- the windows each workload's policy asks for -----------------------------------------

    def specs(self, s: WindowSettings) -> Specs:
        """The windows of these settings, and a per-pod series' empty totals (they cover the
        stable window)."""
        lateness = self.settings.allowed_lateness_seconds
        return (
            hopping(s.stable_window_seconds, s.stable_hop_seconds, lateness),
            hopping(s.panic_window_seconds, s.panic_hop_seconds, lateness),
            PodTotals(s.instant_seconds, s.stable_window_seconds + lateness),
        )

    def specs_of(self, workload: str) -> Specs:
        """`workload`'s windows, their lateness raised by its close phase: asked once per
        workload and batch, so kept (two validated WindowSpecs and a crc32 each time, 0.6 µs
        against 0.05 for the lookup: ~2 % of the core at a sample a second)."""
        specs = self.phases.get(workload)
        if specs is None:
            specs = self.phases[workload] = phased(self.sized.get(workload, self.default), workload)
        return specs

    def on_policy(self, workload: str, sizes: WindowSettings | None) -> None:
        """The windows `workload`'s policy asks for (`governor.window_sizes.window_sizes`;
        None: it has no policy, the defaults hold). A held series whose windows change size
        starts them afresh (`conform`)."""
        specs = self.default if sizes is None else self.specs(sizes)
        if specs == self.sized.get(workload, self.default):
            return
        if specs == self.default:
            self.sized.pop(workload, None)
        else:
            self.sized[workload] = specs
        self.phases.pop(workload, None)
        state = self.live.get(workload)
        if state and self.conform(workload, state):
            self.unwritten[workload] = None

    def conform(self, workload: str, state: WorkloadWindows) -> bool:
        """Give each series of `state` the workload's windows; True if one changed.

        A window kind whose size or hop changed starts over, empty: its windows hold sorted
        values, not the samples' times, so no window of another size can be cut from them. One
        whose lateness alone changed (a close phase) keeps its windows.
        The series keeps its source offset (what was folded is not folded again) and a per-pod
        series its instants (each is one instant, whatever the window), with the new horizon.
        The decider takes a window of a new size over the one it holds
        (`governor.policy.recommend.newer`), so the fresh windows are used at once."""
        stable, panic, no_totals = self.specs_of(workload)
        changed = False
        for metric, series in state.items():
            if series.stable.spec == stable and series.panic.spec == panic:
                continue
            changed = True
            series.stable = respecced(series.stable, stable)
            series.panic = respecced(series.panic, panic)
            if series.totals is not None:
                series.totals = msgspec.structs.replace(series.totals, horizon=no_totals.horizon)
            self.published.pop((workload, metric), None)
        return changed

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
        if state and self.conform(workload, state):
            self.unwritten[workload] = None
        self.live[workload] = state
        return readable

    def revoked(self) -> None:
        """Partitions moved: nothing held is current; the table (restored) is the truth."""
        self.live.clear()
        self.dirty.clear()
        self.unwritten.clear()
        self.phases.clear()

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
        workload = record.workload
        state = self.live.setdefault(workload, {})
        items = record.items
        groups: Iterable[tuple[str, list[tuple[int, events.MetricSample]]]]
        if len(items) == 1:  # a sample a second and series: nothing to group
            groups = ((items[0][1].metric, items),)
        else:
            by_metric: dict[str, list[tuple[int, events.MetricSample]]] = {}
            for off, smp in items:
                by_metric.setdefault(smp.metric, []).append((off, smp))
            groups = by_metric.items()
        out: Outputs[Emitted] = Outputs()
        changed = False
        specs = self.specs_of(workload)  # once per workload and batch, not per sample
        for metric, group in groups:
            series = state.get(metric) or self.new_series(specs)
            applied = series.offset
            # In offset order: all fresh when the first is (the rule, not a replay).
            if group[0][0] > applied:
                fresh = group
            else:
                fresh = [(off, smp) for off, smp in group if off > applied]
                self.count("duplicate", len(group) - len(fresh))
                if not fresh:
                    continue
            closed, state[metric] = self.fold(series, fresh, specs[2])
            changed = True
            out.records += self.due(workload, metric, state[metric], closed, record.now)
        if changed:
            self.unwritten[workload] = None
        return out

    def checkpoint(self) -> Outputs[Emitted]:
        """The table value of every workload changed since the last checkpoint."""
        unwritten, self.unwritten = self.unwritten, {}
        out: Outputs[Emitted] = Outputs()
        live = self.live
        out.checkpoints = [StateWrite(w.encode(), _STATE_ENC.encode(live[w])) for w in unwritten]
        return out

    def tick(self, now: float) -> Outputs[Emitted]:
        """The series held back by the throttle whose interval is up, unless unchanged. The
        others stay held: a window closing first sends them with their newest estimates (at a
        sample a second the panic hop closes one every 2 s, so a series goes out once per
        close, not once per sample: half the load messages, and half the decider's
        evaluations)."""
        out: Outputs[Emitted] = Outputs()
        if not self.dirty:
            return out
        # Every held series waits `interval_s`, with or without a close (START_INTERVAL_S).
        since, cadence = self.published_at, self.interval_s
        due = [key for key in self.dirty if now - since.get(key, -math.inf) >= cadence]
        for key in due:
            out.records += self.publish(key, self.dirty.pop(key), [], now)
        return out

    def new_series(self, specs: Specs | None = None) -> MetricWindows:
        stable, panic, _ = specs or self.default
        return MetricWindows(-1, SeriesWindows(spec=stable), SeriesWindows(spec=panic))

    def fold(
        self,
        series: MetricWindows,
        fresh: list[tuple[int, events.MetricSample]],
        no_totals: PodTotals,
    ) -> tuple[list[tuple[WindowKind, WindowAcc]], MetricWindows]:
        """The windows that closed, and the series with the fresh samples in."""
        # In place (`ingest_into`): the state held is decoded from the table and nobody else
        # holds it; a copy of every window's values per sample was most of the fold's cost.
        pairs = [(smp.timestamp, smp.value) for _, smp in fresh]
        closed_stable, late = ingest_into(series.stable, pairs)
        closed_panic, _ = ingest_into(series.panic, pairs)
        pods = [p for _, m in fresh if (p := pod_sample(m)) is not None]
        if pods:
            series.totals = add_samples(series.totals or no_totals, pods)
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
        if closed or now - self.published_at.get(key, -math.inf) >= self.interval_of(key):
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
        if closed:
            self.cadenced.add(key)
        self.published[key] = sig
        self.published_at[key] = now
        return [] if window is None else [window]

    def interval_of(self, key: SeriesKey) -> float:
        return self.interval_s if key in self.cadenced else self.start_interval_s

    def count(self, outcome: str, n: int) -> None:
        if n > 0:
            self.counts[outcome] = self.counts.get(outcome, 0) + n
