"""The faust aggregator under a rebalance: a second worker joins, the first leaves.

Window state lives in a changelogged table, so after the partitions move every closed window
still equals `governor.windows` over all the samples — nothing lost to the move.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from prometheus_client.parser import text_string_to_metric_families

from governor import events
from governor.bus import Consumer, Producer
from governor.cores.aggregator import AggregatorCore
from governor.cores.state_buckets import bucket_partition
from governor.events import Topic
from governor.window_sizes import WindowSettings
from governor.windows import SeriesWindows, ingest_many, views
from tests.support.procs import Service, governor_service
from tests.support.topics import PIPELINE, run_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def _group(
    bootstrap: str, tmp: Path, suffix: str, kind: str, **env: str
) -> tuple[Topic[Any], Topic[Any], list[str], Callable[[str], Service]]:
    """A run's own metrics and load topics, its 12 workloads, and a maker of its aggregator
    group's workers (each with the settings `env` added)."""
    metrics, load = await run_topics(bootstrap, "rb", suffix, *PIPELINE[:2])
    settings = {
        "METRICS_TOPIC": metrics.name,
        "LOAD_TOPIC": load.name,
        "APP_ID": f"agg-{kind}-{suffix}",
    }

    def worker(name: str) -> Service:
        s = governor_service(
            "aggregator", bootstrap, {**settings, "DATA_DIR": str(tmp / name)}, tmp / f"{name}.log"
        )
        s.env.update(env)
        return s

    return metrics, load, [f"{kind}-{suffix}/Deployment/w{i}" for i in range(12)], worker


async def _play(
    bootstrap: str,
    metrics: Any,
    workloads: list[str],
    t0: float,
    value: Callable[[int, int], float],
    at: dict[int, Callable[[], object]],
) -> dict[str, list[tuple[float, float]]]:
    """300 s of one sample a second per workload (`value(second, index)`), stamped from `t0`;
    `at[second]` runs once that second's samples are on the broker. What was sent, per workload."""
    sent: dict[str, list[tuple[float, float]]] = defaultdict(list)
    async with Producer(bootstrap) as producer:
        for second in range(300):
            for i, wl in enumerate(workloads):
                ts, v = t0 + second + 0.5, value(second, i)
                await producer.publish(
                    metrics, events.MetricSample(workload=wl, metric="m", value=v, timestamp=ts)
                )
                sent[wl].append((ts, v))
            if second in at:
                await producer.flush()
                at[second]()
            await asyncio.sleep(0.03)
        await producer.flush()
    return sent


async def test_windows_survive_a_rebalance(
    kafka_bootstrap: str, tmp_path: Path, unique_suffix: str
) -> None:
    # One table record per partition, smaller than one workload's value once its windows fill
    # (~2,600 bytes; ~700 at the first checkpoint, which a new partition asks for at once): the
    # records restored are shared, and values move out of them under their own keys
    # (governor.cores.state_buckets). At 4,000 only a pair of full values spilled, and on a slow
    # machine every checkpoint of a pair could come before its windows filled (a CI dry run).
    metrics, load, workloads, worker = await _group(
        kafka_bootstrap,
        tmp_path,
        unique_suffix,
        "rb",
        GOVERNOR_AGGREGATOR_TABLE_BUCKETS_PER_PARTITION="1",
        GOVERNOR_AGGREGATOR_TABLE_BUCKET_MAX_BYTES="2000",
    )
    a, b = worker("a").start(), worker("b")
    t0 = time.time() - 400
    try:
        sent = await _play(kafka_bootstrap, metrics, workloads, t0,
                           lambda second, i: float((second * (i + 1)) % 97), {
            100: lambda: b.start(),  # joins: partitions are split between a and b
            200: lambda: a.stop(),  # leaves: b takes every partition, recovering a's tables
        })  # fmt: skip
        want = _expected(sent)
        # Read while b still runs: b may need a while to recover a's tables and catch up, and
        # samples it has not read yet are not lost (their offsets are not committed).
        _, closed = await _closed_stable(kafka_bootstrap, load, want)
        assert "assigned" in b.log_path.read_text().lower()
        seen = _counters(b)
    finally:
        a.stop()
        b.stop()

    _assert_every_window(want, closed, seen)
    # The changelog held shared records, and values too big to share one under their own keys.
    changelog = f"agg-rb-{unique_suffix}-{events.AGGREGATOR_TABLE}-changelog"
    keys = await _keys(kafka_bootstrap, changelog)
    assert {bucket_partition(k) is None for k in keys} == {True, False}, sorted(keys)


def _expected(sent: dict[str, list[tuple[float, float]]]) -> dict[str, dict[float, Any]]:
    """Per workload, its closed stable windows by start: the pure `ingest_many` of what was sent,
    on the stable window the aggregator gives it (60 s / 10 s, 2 s lateness and its close phase:
    without the phase a run whose last sample fell within a workload's phase past a window's
    watermark expected a window the aggregator rightly still held open)."""
    core = AggregatorCore(WindowSettings())
    return {
        wl: {
            acc.start: acc
            for acc in ingest_many(SeriesWindows(spec=core.specs_of(wl)[0]), samples)[1]
        }
        for wl, samples in sent.items()
    }


def _counters(worker: Service) -> dict[str, float]:
    """The worker's sample and skipped-record counters, for a failure's message: whether a
    missing window's samples were never read, skipped by the offset order, or read late (a
    worker that crashed says so instead of hiding the window check behind a refused scrape)."""
    try:
        text = worker.metrics()
    except OSError as e:
        return {f"metrics unreachable: {e}": math.nan}
    wanted = ("governor_aggregator_samples_total", "governor_aggregator_records_skipped_total")
    return {
        f"{s.name}{s.labels}": s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in wanted
    }


def _assert_every_window(
    want: dict[str, dict[float, Any]],
    closed: dict[str, dict[float, list[events.LoadWindow]]],
    counters: dict[str, float],
) -> None:
    """Every window that closed before the end was published, each view of it equal to the
    pure computation."""
    for wl, windows in want.items():
        got = closed.get(wl, {})
        missing = sorted(set(windows) - set(got))
        assert not missing, f"{wl}: missing {len(missing)} windows {missing[:3]}; {counters}"
        for start, acc in windows.items():
            assert {(w.count, w.max, w.p95) for w in got[start]} == {
                (acc.count, acc.max, acc.p95)
            }, (wl, start, counters)


def _first_seen_in_order(starts: list[float]) -> bool:
    """Each window start new to the sequence is later than every one before it: a replay may
    repeat windows, never send an older window for the first time after a newer one."""
    seen: set[float] = set()
    newest = float("-inf")
    for s in starts:
        if s in seen:
            continue
        if s < newest:
            return False
        seen.add(s)
        newest = s
    return True


def test_first_seen_in_order_rejects_an_older_new_window() -> None:
    assert _first_seen_in_order([0.0, 10.0, 0.0, 10.0, 20.0])
    assert not _first_seen_in_order([0.0, 20.0, 10.0])


async def test_a_killed_worker_loses_no_window(
    kafka_bootstrap: str, tmp_path: Path, unique_suffix: str
) -> None:
    # SIGKILL mid-run, checkpoints every second: load records sent and not acked, table values
    # written and offsets not committed. The next owner replays from the committed offsets; every
    # closed window is still on the load topic, and each workload's windows in order.
    metrics, load, workloads, worker = await _group(
        kafka_bootstrap,
        tmp_path,
        unique_suffix,
        "kill",
        GOVERNOR_AGGREGATOR_CHECKPOINT_INTERVAL_MS="1000",
        # The group moves the killed member's partitions after this long, not faust's 60 s.
        GOVERNOR_AGGREGATOR_SESSION_TIMEOUT_SECONDS="10",
        GOVERNOR_AGGREGATOR_TABLE_BUCKETS_PER_PARTITION="1",  # shared records, restored
    )
    a, b = worker("a").start(), worker("b")
    t0 = time.time() - 400

    def kill_a_start_b() -> None:
        a.kill9()
        b.start(ready_timeout=150)  # the group waits for a's session to time out first

    try:
        sent = await _play(kafka_bootstrap, metrics, workloads, t0,
                           lambda second, i: float((second * (i + 3)) % 89),
                           {150: kill_a_start_b})  # fmt: skip
        want = _expected(sent)
        starts, closed = await _closed_stable(kafka_bootstrap, load, want)
        seen = _counters(b)
    finally:
        a.stop()
        b.stop()

    _assert_every_window(want, closed, seen)
    # The kill left folded samples uncommitted: b read them again (to fold or to skip).
    handled = sum(v for k, v in seen.items() if k.startswith("governor_aggregator_samples_total{"))
    assert handled > 149 * len(workloads), seen
    for wl in workloads:
        assert _first_seen_in_order(starts[wl]), (wl, starts[wl])


async def _keys(bootstrap: str, topic: str) -> set[bytes]:
    """The keys on a topic (read from the start until 3 s bring nothing new)."""
    raw = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await raw.start()
    keys: set[bytes] = set()
    try:
        quiet_until = time.monotonic() + 10
        while time.monotonic() < quiet_until:
            for records in (await raw.getmany(timeout_ms=1000)).values():
                keys.update(r.key for r in records if r.key is not None)
                quiet_until = time.monotonic() + 3
    finally:
        await raw.stop()
    return keys


async def _closed_stable(
    bootstrap: str, load: Any, want: dict[str, dict[float, Any]]
) -> tuple[dict[str, list[float]], dict[str, dict[float, list[events.LoadWindow]]]]:
    """Per workload the starts of its closed stable windows in topic order, and every view of
    each; read until every wanted window came, or nothing new came for 90 s."""
    starts: dict[str, list[float]] = defaultdict(list)
    closed: dict[str, dict[float, list[events.LoadWindow]]] = defaultdict(lambda: defaultdict(list))
    consumer = Consumer(bootstrap, [load], group_id=None, check_keys=False)
    await consumer.start()
    try:
        # The wait ends when the load topic stalls, not at a fixed length: a new owner that is
        # slow to recover the tables and catch up is not a loss, a window that never comes is.
        began = time.monotonic()
        idle_until = began + 8
        stalled_at = began + 90
        while time.monotonic() < min(stalled_at, began + 420):
            batch = await consumer.poll(1000)
            for m in batch:
                for w in views(m.value) if m.value is not None else ():
                    if w.closed and w.window == "stable" and w.workload in want:
                        starts[w.workload].append(w.start)
                        closed[w.workload][w.start].append(w)
            done = all(set(want[wl]) <= set(closed.get(wl, {})) for wl in want)
            if batch:
                idle_until = time.monotonic() + 2
                stalled_at = time.monotonic() + 90
            if done and time.monotonic() > idle_until:
                break
    finally:
        await consumer.stop()
    return starts, closed
