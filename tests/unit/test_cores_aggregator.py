"""The aggregator's core (governor.cores.aggregator): dedup by source offset, the windows, the
throttle, and the state it hands the table and takes back."""

from __future__ import annotations

import math
from itertools import pairwise

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from governor import events
from governor.cores.aggregator import (
    START_INTERVAL_S,
    AggregatorCore,
    StateWrite,
    WindowSettings,
    WorkloadSamples,
    WorkloadWindows,
    close_phase,
)
from governor.metric_records import Partitions
from governor.windows import (
    SeriesWindows,
    WindowAcc,
    ingest_many,
    to_load_window,
    to_window_view,
)

W = "ns/Deployment/web"
S = WindowSettings()  # 60 s / 10 s stable, 6 s / 2 s panic, 2 s lateness, 2.5 s throttle
# W's windows close this much after the lateness (its close phase, in [0, 2 s): the panic hop).
PHASE = close_phase(W, S.panic_hop_seconds)


def sample(ts: float, value: float = 1.0, metric: str = "rps") -> events.MetricSample:
    return events.MetricSample(workload=W, metric=metric, value=value, timestamp=ts)


def items(times: list[float], first_offset: int = 0) -> list[tuple[int, events.MetricSample]]:
    return [(first_offset + i, sample(ts, float(i))) for i, ts in enumerate(times)]


def state_of(write: object) -> WorkloadWindows:
    assert isinstance(write, StateWrite)
    assert write.key == W.encode()
    return msgspec.msgpack.decode(write.value, type=WorkloadWindows)


def test_a_fold_checkpoints_the_state_and_publishes_the_estimates() -> None:
    core = AggregatorCore(S)
    out = core.on(WorkloadSamples(W, items([1000.0, 1000.5]), now=0.0))
    assert not out.checkpoints  # written once per checkpoint, not per batch
    [write] = core.checkpoint().checkpoints
    assert not core.checkpoint()  # nothing changed since
    assert state_of(write)["rps"].offset == 1
    [window] = out.records
    assert isinstance(window, events.LoadWindow)
    assert (window.workload, window.metric, window.closed) == (W, "rps", False)
    assert {window.window} | {v.window for v in window.more} == {"stable", "panic"}
    assert window.count == 2
    assert core.take_counts() == {"ok": 2}
    assert core.take_counts() == {}


def test_redelivered_samples_are_counted_duplicate_and_change_nothing() -> None:
    core = AggregatorCore(S)
    batch = items([1000.0, 1001.0, 1002.0])
    core.on(WorkloadSamples(W, batch, now=0.0))
    core.take_counts()
    again = core.on(WorkloadSamples(W, batch, now=10.0))
    assert not again  # no load window
    core.checkpoint()
    core.on(WorkloadSamples(W, batch, now=11.0))
    assert not core.checkpoint()  # and no table write
    assert core.take_counts() == {"duplicate": 6}


def cadenced(core: AggregatorCore) -> int:
    """Fold two samples into `core` whose second closes a panic window (1006 s passes the
    watermark of the one ending at 1002 s: 2 s lateness and W's phase): the series is throttled
    at its interval from then on. The next free offset."""
    core.on(WorkloadSamples(W, items([1000.0]), now=0.0))
    [window] = core.on(WorkloadSamples(W, items([1006.0], first_offset=1), now=0.1)).records
    assert isinstance(window, events.LoadWindow)
    assert any(v.closed for v in (window, *window.more))
    return 2


def test_the_throttle_holds_an_estimate_back_until_the_tick() -> None:
    core = AggregatorCore(S)
    off = cadenced(core)
    held = core.on(WorkloadSamples(W, items([1006.1], first_offset=off), now=0.2))
    assert not held.records  # less than the interval after the last one
    assert not core.tick(0.5)  # held until its own interval is up
    [window] = core.tick(0.1 + S.publish_interval_ms / 1000).records
    assert isinstance(window, events.LoadWindow) and window.count == 3
    assert not core.tick(10.0)  # nothing held back any more


def test_a_new_series_goes_out_every_other_sample_as_it_arrives_until_its_first_close() -> None:
    core = AggregatorCore(S)
    sent = []
    for i in range(12):  # a sample a second, `now` its arrival
        out = core.on(WorkloadSamples(W, items([1000.0 + i], first_offset=i), now=float(i)))
        windows = [w for w in out.records if isinstance(w, events.LoadWindow)]
        sent.append((i, bool(windows), any(v.closed for w in windows for v in (w, *w.more))))
        # the tick between two samples sends nothing: the held one waits for the next
        assert not core.tick(i + 0.75).records
        for w in windows:  # each message carries the sample that sent it
            assert max(v.newest_sample for v in (w, *w.more)) == 1000.0 + i
    first_close = next(i for i, _, closed in sent if closed)
    # the first sample at or past 1002 s + 2 s lateness + W's phase closes the panic window
    # ending at 1002 s
    assert first_close == math.ceil(4 + PHASE)
    # the first at once, then every other one (START_INTERVAL_S after the last message)
    assert [out for _, out, _ in sent[:first_close]] == [i % 2 == 0 for i in range(first_close)]
    # then only with a close (the panic hop's, every 2 s): the sample between waits for it
    after = [out for _, out, _ in sent[first_close:]]
    assert after == [i % 2 == 0 for i in range(len(after))]
    assert all(closed for _, out, closed in sent[first_close:] if out)


def test_a_new_series_held_estimate_goes_out_on_the_tick_after_the_interval() -> None:
    core = AggregatorCore(S)
    assert core.on(WorkloadSamples(W, items([1000.0]), now=0.0)).records
    assert not core.on(WorkloadSamples(W, items([1001.0], first_offset=1), now=1.0)).records
    assert not core.tick(START_INTERVAL_S + 0.5).records  # a next sample may still send it
    [window] = core.tick(S.publish_interval_ms / 1000).records  # the source went quiet
    assert isinstance(window, events.LoadWindow) and window.newest_sample == 1001.0
    assert not core.tick(10.0).records


def test_a_closed_window_sends_the_held_estimate_with_it() -> None:
    core = AggregatorCore(S)
    core.on(WorkloadSamples(W, items([1000.0]), now=0.0))
    held = core.on(WorkloadSamples(W, items([1001.0], first_offset=1), now=0.1))
    assert not held.records  # within the start-up interval of the first one
    # 1006 s passes the watermark of the panic window ending at 1002 s: it goes out at once,
    # with the estimates of both samples held
    [window] = core.on(WorkloadSamples(W, items([1006.0], first_offset=2), now=0.2)).records
    assert isinstance(window, events.LoadWindow)
    assert any(v.closed for v in (window, *window.more))
    assert not core.tick(10.0)  # the held series went out with it


def test_an_unchanged_estimate_is_not_sent_again() -> None:
    core = AggregatorCore(S)
    assert core.on(WorkloadSamples(W, items([1100.0]), now=0.0)).records
    # a fresh record whose sample is late changes no window: a second later nothing goes out
    out = core.on(WorkloadSamples(W, items([1000.0], first_offset=1), now=1.0))
    assert not out.records
    assert core.checkpoint().checkpoints  # the late count changed


def test_a_closed_window_goes_out_at_once_within_the_interval() -> None:
    core = AggregatorCore(S)
    core.on(WorkloadSamples(W, items([1000.0]), now=0.0))
    # 20 s later in event time: the panic windows around 1000 s close (watermark passed them)
    out = core.on(WorkloadSamples(W, items([1020.0], first_offset=1), now=0.1))
    [window] = out.records
    assert isinstance(window, events.LoadWindow)
    views = [window, *window.more]
    assert any(v.closed and v.window == "panic" for v in views)


def test_a_restored_state_keeps_the_offsets_so_a_rebalance_does_not_fold_twice() -> None:
    first = AggregatorCore(S)
    batch = items([1000.0, 1001.0])
    first.on(WorkloadSamples(W, batch, now=0.0))
    [write] = first.checkpoint().checkpoints
    assert isinstance(write, StateWrite)
    second = AggregatorCore(S)
    assert not second.holds(W)
    assert second.restore(W, write.value)
    assert second.holds(W)
    assert not second.on(WorkloadSamples(W, batch, now=1.0))
    assert second.take_counts() == {"duplicate": 2}


def test_a_table_value_of_windows_without_the_phase_keeps_them() -> None:
    # A value written before close phases (lateness 2 s alone): the boundaries are the same, so
    # its windows are kept, on the phased spec.
    core = AggregatorCore(S)
    unphased = core.new_series(core.default)
    _, unphased = core.fold(unphased, items([1000.0, 1001.0]), core.default[2])
    value = msgspec.msgpack.encode({"rps": unphased})
    stored = msgspec.msgpack.decode(value, type=WorkloadWindows)["rps"]
    assert stored.stable.spec.allowed_lateness == S.allowed_lateness_seconds
    assert core.restore(W, value)
    series = core.live[W]["rps"]
    assert series.stable.spec.allowed_lateness == S.allowed_lateness_seconds + PHASE
    assert series.stable.open == stored.stable.open and stored.stable.open
    assert series.panic.open == stored.panic.open and stored.panic.open


def test_the_closes_of_series_on_one_beat_spread_over_the_hop() -> None:
    # 400 workloads whose sources report on the same second: without a phase each would close
    # its panic window on the same beat, every 2 s (all 400, then none).
    core = AggregatorCore(S)
    workloads = [f"ns/Deployment/w{i}" for i in range(400)]
    closes_per_beat = []
    for t in range(30):
        closes = 0
        for w in workloads:
            smp = events.MetricSample(workload=w, metric="rps", value=1.0, timestamp=1000.0 + t)
            for window in core.on(WorkloadSamples(w, [(t, smp)], now=float(t))).records:
                assert isinstance(window, events.LoadWindow)
                closes += any(v.closed for v in (window, *window.more))
        closes_per_beat.append(closes)
    steady = closes_per_beat[10:]
    # Every workload closes once per hop (2 beats), and no beat takes much more than its half.
    assert sum(steady) == 400 * len(steady) // 2
    assert max(steady) <= 0.6 * 400
    assert all(0 <= close_phase(w, 2.0) < 2.0 for w in workloads)
    assert close_phase(W, 2.0) == PHASE  # the same id, the same phase (crc32, not hash())


def test_an_unreadable_table_value_starts_the_series_over() -> None:
    core = AggregatorCore(S)
    assert core.restore(W, b"\xc1 not msgpack") is False
    assert core.holds(W) and core.live[W] == {}
    assert core.restore(W, None) is True


def test_revoked_drops_the_state_and_the_held_back_series() -> None:
    core = AggregatorCore(S)
    core.on(WorkloadSamples(W, items([1000.0]), now=0.0))
    core.on(WorkloadSamples(W, items([1000.1], first_offset=1), now=0.1))
    assert core.dirty and core.unwritten
    core.revoked()
    assert not core.holds(W) and not core.dirty and not core.checkpoint()
    assert not core.tick(10.0)


def test_resume_offsets_are_one_after_the_newest_folded_per_partition() -> None:
    parts = Partitions(12)
    core = AggregatorCore(S)
    other = "ns/Deployment/api"
    core.on(WorkloadSamples(W, items([1000.0, 1001.0], first_offset=40), now=0.0))
    core.on(WorkloadSamples(other, [(7, sample(1000.0))], now=0.0))
    core.restore("ns/Deployment/empty", None)
    expected: dict[int, int] = {}
    for workload, newest in ((W, 41), (other, 7)):
        p = parts.of(workload)
        expected[p] = max(expected.get(p, 0), newest + 1)
    assert core.resume_offsets(parts) == expected


def test_late_samples_are_counted_late_not_ok() -> None:
    core = AggregatorCore(S)
    core.on(WorkloadSamples(W, items([1100.0]), now=0.0))
    core.take_counts()
    core.on(WorkloadSamples(W, items([1000.0], first_offset=1), now=1.0))  # behind the watermark
    assert core.take_counts() == {"late": 1}


times = st.lists(st.floats(1000.0, 1200.0, allow_nan=False), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(times, st.lists(st.integers(1, 10), min_size=1, max_size=10))
def test_the_state_does_not_depend_on_how_samples_were_batched(
    ts: list[float], cuts: list[int]
) -> None:
    whole = AggregatorCore(S)
    whole.on(WorkloadSamples(W, items(ts), now=0.0))
    [expected] = whole.checkpoint().checkpoints
    split = AggregatorCore(S)
    batch, start, last = items(ts), 0, None
    for i, size in enumerate([*cuts, len(batch)]):
        part = batch[start : start + size]
        if part:
            split.on(WorkloadSamples(W, part, now=float(start)))
        if i % 2:  # checkpoints between some batches, not others
            written = split.checkpoint().checkpoints
            last = written[-1] if written else last
        start += size
    written = split.checkpoint().checkpoints
    last = written[-1] if written else last
    assert last is not None and state_of(last) == state_of(expected)


@settings(max_examples=60, deadline=None)
@given(times, st.integers(0, 39))
def test_replaying_any_suffix_after_a_crash_changes_nothing(ts: list[float], crash: int) -> None:
    batch = items(ts)
    core = AggregatorCore(S)
    core.on(WorkloadSamples(W, batch, now=0.0))
    [write] = core.checkpoint().checkpoints
    assert isinstance(write, StateWrite)
    restarted = AggregatorCore(S)
    restarted.restore(W, write.value)
    assert not restarted.on(WorkloadSamples(W, batch[min(crash, len(batch) - 1) :], now=1.0))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 2.9), min_size=1, max_size=20), st.booleans())
def test_a_series_goes_out_at_most_once_per_interval_without_a_closed_window(
    gaps: list[float], after_a_close: bool
) -> None:
    core = AggregatorCore(S)
    first = cadenced(core) if after_a_close else 0
    interval = S.publish_interval_ms / 1000 if after_a_close else START_INTERVAL_S
    now, sent = 0.1, [0.1] if after_a_close else []
    for i, gap in enumerate(gaps, start=first):
        now += gap
        # 10 ms apart in event time: no window closes within the run
        ts = 1004.0 + i * 0.01
        for w in core.on(WorkloadSamples(W, [(i, sample(ts))], now=now)).records:
            assert isinstance(w, events.LoadWindow) and not w.closed
            sent.append(now)
    assert all(b - a >= interval for a, b in pairwise(sent))


@settings(max_examples=60, deadline=None)
@given(times, st.booleans())
def test_a_window_view_is_the_load_window_without_the_names(ts: list[float], closed: bool) -> None:
    series, _, _ = ingest_many(SeriesWindows(spec=AggregatorCore(S).stable_spec), items_ts(ts))
    fields = events.WindowView.__struct_fields__
    for acc in [*series.open, WindowAcc(start=0.0, end=60.0)]:
        whole = to_load_window(acc, W, "rps", "stable", closed=closed)
        view = to_window_view(acc, "stable", closed=closed)
        assert {f: getattr(view, f) for f in fields} == {f: getattr(whole, f) for f in fields}


def items_ts(ts: list[float]) -> list[tuple[float, float]]:
    return [(t, float(i % 7)) for i, t in enumerate(ts)]
