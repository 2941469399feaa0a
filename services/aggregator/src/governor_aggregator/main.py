"""governor-aggregator: a faust-streaming app turning samples into windowed load.

Per (workload, metric) it keeps a stable window (default 60 s, hopping every 10 s) and a panic
window (default 6 s, hopping every 2 s) over event time, computed by `governor.windows` — the
same code the simulator runs; a workload whose policy has `panic` gets that section's windows
(`governor.window_sizes`, read from governor.policies by `governor_aggregator.policies`).
Per series it publishes ONE LoadWindow message whenever windows close (the closed ones and
the open windows' estimates, in `LoadWindow.more`), and otherwise the open windows' estimates
at most every `publish_interval_ms` (2.5 s; before a series' first closed window a sample goes
out as it arrives 1.5 s after the last message, so a new workload's decisions see its newest
sample), so a decision never waits for a whole window and the load topic carries about one
message per series and panic hop (2 s).

Only faust's public API (tests/unit/test_aggregator_faust_api.py lists what it relies on and fails
on an upgrade that changes it):

- records of governor.metrics (MetricSample or MetricBatch, `governor.metric_records`) come
  as raw bytes from an agent's `stream.noack_take` batches (acked by `stream.ack`, below);
  what cannot be read goes to governor.metrics.dlq with the reason in headers, and a bad sample
  of a batch alone, with its index (`governor-dlq-index`);
- the window state lives in a faust Table keyed by workload with `use_partitioner=True`: its
  changelog partition is the workload's partition (the producers' partitioner), so a restarted or
  rebalanced worker recovers it with the metrics partition. The decoded state is kept in the
  core, dropped on every revocation (then the table is the truth).
- one table write per bucket of changed workloads per `checkpoint_interval_ms`, not per batch:
  a workload's value is ~2.5 KB, and at a sample a second per batch that was ~25 MB/s of acks=all
  changelog at 10,000 workloads, with the load windows queued behind it in the producer. So the
  events of a batch are not acked when it is handled: a checkpoint (every interval) writes the
  changed workloads' values (`table[key] = value`, many workloads a record:
  `governor.cores.state_buckets`) and then acks the events it covers. faust
  commits only acked offsets and flushes its producer (the changelog) first, so a committed
  offset never runs ahead of the table. What was folded after the last checkpoint is replayed
  by the partition's next owner (a crash, a stop, a rebalance: `stream_wait_empty` is off, so
  faust does not wait for those acks, and a revocation drops them with the state); the offsets
  in the state skip what the table already holds. A checkpoint, a batch and a revocation never
  interleave (a lock): the table always holds the state of a batch boundary.
- exactly-once windows over at-least-once delivery: the state of each series carries the last
  source offset applied, so records redelivered after a crash or a rebalance are skipped; a
  closed window may be published twice then (the decider keeps the newest view of each).
- each metrics partition is folded in offset order (`governor.stream_order`): after a rebalance
  faust 0.15.3 can deliver records fetched before its seek to the committed offset, from past
  records it dropped, and then drops the re-fetched ones as already read. The first record
  ahead of a partition's next offset (after the newest offset in the table state of its
  workloads) seeks it back there (`app.consumer.seek_wait`); stale ones are skipped until it
  comes.
- load windows go out through governor's own producer (`Producer.publish_many`: one record
  batch per partition per batch), not faust's: a per-record `send` (~20 µs and a future each)
  was half the aggregator's time, and the windows queued behind the changelog in faust's
  producer reached the topic 18-30 s late at 10,000 workloads. faust's producer keeps the
  changelog. What faust does not see it cannot flush before a commit, so a checkpoint first
  waits for the broker's acks of every load record sent so far, then writes the table, then
  acks the events: a table value (whose offsets make the next owner skip what it folded) is
  never written before the windows of what it folded are on the topic. A failed load record
  crashes the worker (`app.crash`) before anything more is acked; the next owner replays
  from the committed offsets. All load records go out under the lock, in the order the core
  made them, from one producer (aiokafka sends one request per broker at a time, idempotent):
  a workload's load messages stay in order.
- A table write takes its changelog partition from faust's producer's metadata, which aiokafka
  narrows to the topics it was sent to once one send needed a refresh: a write that finds the
  changelog gone goes out with `send_and_wait` first (which adds the topic), then into the
  table (`TableValues.store`); the agent crashed on it before.

faust 0.15.3 fixes the consumer's fetch wait at 1.5 s (no setting): a partition whose records
were buffered when a fetch was sent waits for that fetch, so a sample could wait up to 1.5 s.
`make setup` patches a copy of faust in the environment (deploy/patches, `tools/patch_deps.py`)
so that `FAUST_FETCH_MAX_WAIT_MS` sets it; the aggregator sets it to `fetch_max_wait_ms`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import faust
import msgspec
from faust.types import TP
from prometheus_client import Counter, Gauge

from governor import events, gc_tuning
from governor.bus import (
    DEAD_LETTERS,
    H_DLQ_INDEX,
    DeadLetter,
    Decoder,
    Producer,
    codec_for,
    dlq_headers,
    record_consumer_lag,
)
from governor.cores import Outputs
from governor.cores.aggregator import (
    AggregatorCore,
    Emitted,
    WindowSettings,
    WorkloadSamples,
    newest_offset,
)
from governor.cores.state_buckets import StateBuckets
from governor.entry import service_settings
from governor.metric_records import Partitions, Refused, split_record
from governor.settings import KafkaSettings
from governor.stream_order import StreamOrder
from governor.telemetry import HealthServer, JsonFormatter, SlowTickAsInfo, Tally
from governor_aggregator.app import FETCH_WAIT_ENV, broker_credentials, faust_app
from governor_aggregator.cli import PREFIX
from governor_aggregator.policies import PolicyFollower
from governor_aggregator.table import TableValues, WorkloadTable

log = logging.getLogger("governor.aggregator")

SAMPLES = Counter("governor_aggregator_samples_total", "Samples aggregated.", ["outcome"])
WINDOWS = Counter(
    "governor_aggregator_windows_total", "Load windows published.", ["window", "state"]
)
# Records (not samples) skipped by the partition's offset order (governor.stream_order).
RECORDS_SKIPPED = Counter(
    "governor_aggregator_records_skipped_total",
    "Records skipped by the partition's offset order.",
    ["reason"],
)
SERIES = Gauge("governor_aggregator_series", "Workloads whose windows are held.")

__all__ = [
    "FETCH_WAIT_ENV",
    "Aggregation",
    "AggregatorSettings",
    "WorkloadTable",
    "broker_credentials",
    "build_app",
    "start",
]


class AggregatorSettings(WindowSettings, kw_only=True, forbid_unknown_fields=True):
    """The core's window and throttle settings (`WindowSettings`), and the service's."""

    kafka: KafkaSettings = msgspec.field(default_factory=KafkaSettings)
    app_id: str = events.AGGREGATOR_APP_ID
    store: str = "memory://"
    http_host: str = "127.0.0.1"
    http_port: int = 8082
    log_level: str = "INFO"
    data_dir: str = "/tmp/governor-aggregator"
    # Where a NEW consumer group starts. A restarted one resumes from its commits either way;
    # a fresh deployment has no use for the samples retained from before it existed.
    auto_offset_reset: Literal["latest", "earliest"] = "latest"
    producer_buffer_messages: int = 10_000
    # Records are handled in batches of at most this many, waiting at most this long to fill one
    # (faust's take_events waits the whole `within` unless the batch fills). 100 ms: a backlog
    # then gives each workload many samples per batch, and the fold, the table write and the load
    # message are paid per workload and batch (~4 µs a sample at 20, ~18 µs at 1).
    batch_max_samples: int = 5_000
    batch_within_ms: int = 100
    # Each changed workload's table value is written (and the records folded into it acked, so
    # committable) this often; a crash replays at most this much. See the docstring. At 10,000
    # workloads 10 s took 0.056-0.057 core per 1,000 workloads against 0.061 at 5 s
    # (bench/pipeline_latency.py, alternating runs), when each workload was a record of its own.
    checkpoint_interval_ms: int = 10_000
    # The table's records (`governor.cores.state_buckets`): a metrics partition's workloads
    # share this many, of at most this many bytes each (well inside Kafka's 1 MB). A record per
    # workload was a faust send each (~45 us): 14 % of the aggregator at 10,000 workloads.
    table_buckets_per_partition: int = 64
    table_bucket_max_bytes: int = 512 * 1024
    # How long a fetch may wait at the broker for data (faust's own: 1500; see the docstring).
    fetch_max_wait_ms: int = 100
    # A partition whose next offset has not come for this long after later ones did is taken to
    # have lost the records in between to retention (see governor.stream_order).
    gap_timeout_seconds: float = 30.0
    # How long the group waits for a silent member before its partitions move (faust's own
    # default, 60 s, left a killed worker's workloads unaggregated for a minute; the deciders'
    # consumers use aiokafka's 10 s). Heartbeats go every 3 s, so a stalled loop has ~6 beats.
    session_timeout_seconds: float = 20.0
    # The one source of truth for policies (the decider's `policy_source`), whose windows each
    # workload gets (governor_aggregator.policies); nothing is folded before they were read,
    # or this long.
    policy_source: events.PolicyOrigin = "file"
    policies_wait_seconds: float = 30.0
    # Standby copies of the other workers' tables (faust's `table_standby_replicas`, its own
    # default 1). 0: reading their changelogs live was ~5 % of a worker at 10,000 workloads,
    # and a partition's next owner restores its windows from the changelog anyway
    # (tests/integration/test_aggregator_rebalance.py); a standby only shortens that recovery.
    # (0 lost a moved partition's windows while a partition's first checkpoint could wait for
    # the interval: see `Aggregation.acked_partitions`.)
    standby_replicas: int = 0
    # Topic names (same types and keys), for isolated test and benchmark runs.
    metrics_topic: str = events.METRICS.name
    load_topic: str = events.LOAD.name
    policies_topic: str = events.POLICIES.name


class Aggregation:
    """The agent's glue over one faust app: records in (offset order, dead letters), the core
    (`governor.cores.aggregator`) folding them, table writes and load windows out."""

    def __init__(self, app: faust.App, s: AggregatorSettings) -> None:
        self.app = app
        self.s = s
        self.core = AggregatorCore(s)
        raw = {"key_serializer": "raw", "value_serializer": "raw"}
        self.metrics_topic = app.topic(s.metrics_topic, key_type=bytes, value_type=bytes, **raw)
        self.dlq_topic = app.topic(f"{s.metrics_topic}.dlq", **raw)
        buckets = StateBuckets(
            lambda w: self.partitions_of_metrics().of(w),
            newest_offset,
            per_partition=s.table_buckets_per_partition,
            max_bytes=s.table_bucket_max_bytes,
        )
        self.values = TableValues(app, buckets)
        self.headers = Decoder(events.METRICS)
        self.expected_headers = codec_for(events.METRICS).headers
        self.partitions: Partitions | None = None
        # Next offset to handle per metrics partition (governor_bus_consumer_lag).
        self.handled: dict[tuple[str, int], int] = {}
        # Per metrics partition the next offset to fold: records faust delivers from a stale
        # position after a rebalance wait for the re-fetch from the committed offset.
        self.order = StreamOrder(s.gap_timeout_seconds)
        self.resume_at: dict[int, int] | None = None
        self.interval = s.publish_interval_ms / 1000.0
        self.load_topic = dataclasses.replace(events.LOAD, name=s.load_topic)
        self.loads = Producer(
            s.kafka.bootstrap, client_id=f"{s.app_id}-load", security=s.kafka.security
        )
        self.loads_started = False
        # The load records of this batch (sent together), and the acks not waited for yet.
        self.windows: list[events.LoadWindow] = []
        self.load_acks: list[asyncio.Future[Any]] = []
        self.window_counters = {
            (kind, closed): WINDOWS.labels(kind, "closed" if closed else "open")
            for kind in ("stable", "panic")
            for closed in (True, False)
        }
        self.samples = {o: SAMPLES.labels(o) for o in ("ok", "late", "duplicate")}
        self.skipped = {r: RECORDS_SKIPPED.labels(r) for r in ("duplicate", "ahead")}
        self.tally = Tally()  # per workload and window counts, applied once per batch
        # The agent's stream (set when it starts), the events handled and not acked yet, and
        # when the last checkpoint was written (monotonic).
        self.stream: Any = None
        self.unacked: list[Any] = []
        self.checkpointed_at = time.monotonic()
        self.checkpoint_s = s.checkpoint_interval_ms / 1000.0
        # The metrics partitions a checkpoint of this process acked (so the group has an offset
        # of theirs), and whether a batch folded one that is not: that one is checkpointed at
        # once. A partition the group has no offset of resumes at `auto_offset_reset` (latest)
        # on its next owner, past everything folded here and not acked: its windows were lost
        # when a rebalance came before the first interval was up.
        self.acked_partitions: set[Any] = set()
        self.new_partition = False
        self.lock = asyncio.Lock()  # a checkpoint never lands inside a batch
        self.policies = PolicyFollower(
            self.core,
            s,
            bootstrap=s.kafka.bootstrap,
            security=s.kafka.security,
            client_id=f"{s.app_id}-policies",
            source=s.policy_source,
            locked=self.locked,
            topic=dataclasses.replace(events.POLICIES, name=s.policies_topic),
        )

    async def locked(self, change: Callable[[], None]) -> None:
        """`change` to the core between batches and checkpoints (a policy's windows)."""
        async with self.lock:
            change()

    def hold(self, workload: str) -> None:
        """The core holds `workload`'s state: from the table when it did not."""
        if not self.core.holds(workload) and not self.core.restore(
            workload, self.values.stored(workload)
        ):
            log.warning("table value of %r unreadable: starting over", workload)

    async def revoked(self) -> None:
        """Partitions moved: the table (restored from the changelog) is the truth again; what
        was folded since the last checkpoint is replayed from the committed offsets."""
        async with self.lock:
            self.core.revoked()
            self.values.clear()
            self.unacked = []
            self.order.moved()
            self.resume_at = None

    def resume_point(self, partition: int, parts: Partitions) -> int | None:
        """Where a metrics partition resumes (`AggregatorCore.resume_offsets`). None: nothing
        of it folded yet; it resumes with whatever comes first."""
        if self.resume_at is None:
            for workload in self.values.workloads():
                self.hold(workload)
            self.resume_at = self.core.resume_offsets(parts)
        return self.resume_at.get(partition)

    def partitions_of_metrics(self) -> Partitions:
        if self.partitions is None:
            count = self.app.consumer.topic_partitions(self.s.metrics_topic)
            self.partitions = Partitions(count or events.METRICS.partitions)
        return self.partitions

    # --- the batch ---------------------------------------------------------------------------

    async def handle(self, batch: list[Any]) -> None:
        """One batch of records: per workload all its samples folded at once, and per series
        at most one load message; its events are acked by the next checkpoint."""
        await self.policies.ready.wait()  # each workload's windows before its first sample
        async with self.lock:
            await self.fold_batch(batch)
            await self.send_windows()
            self.unacked += batch

    async def fold_batch(self, batch: list[Any]) -> None:
        by_workload: dict[str, list[tuple[int, events.MetricSample]]] = {}
        parts = self.partitions_of_metrics()
        clock = time.monotonic()
        for event in batch:
            message = event.message
            tp = (message.topic, message.partition)
            if self.order.unknown(tp):
                self.order.resume(tp, self.resume_point(message.partition, parts))
            step = self.order.step(tp, message.offset, clock)
            if step != "deliver":
                self.skipped["ahead" if step == "seek" else step].inc()
                if step == "seek":  # faust dropped the records in between as read: fetch them
                    # `seek_wait`, not `seek`: faust's `seek` calls aiokafka's from this thread,
                    # which deletes the fetcher's buffered records while the consumer's thread may
                    # be iterating them (a KeyError in `fetched_records` that crashed a worker
                    # taking over partitions); `seek_wait` seeks in the consumer's thread.
                    await self.app.consumer.seek_wait({message.tp: self.order.expected(tp)})
                continue
            self.handled[tp] = message.offset + 1
            if tp not in self.acked_partitions:
                self.new_partition = True
            for smp in await self.read(message, parts):
                items = by_workload.get(smp.workload)
                if items is None:
                    items = by_workload[smp.workload] = []
                items.append((message.offset, smp))
        now = time.monotonic()
        for workload, items in by_workload.items():
            self.hold(workload)
            await self.emit(self.core.on(WorkloadSamples(workload, items, now)))
        self.count_samples()
        self.tally.flush()

    async def read(self, message: Any, parts: Partitions) -> list[events.MetricSample]:
        """The samples of one record to aggregate; dead-letters the rest."""
        headers = message.headers or []
        items = headers.items() if isinstance(headers, dict) else headers
        pairs = [(k, bytes(v)) for k, v in items]
        try:
            if pairs and tuple(pairs) != self.expected_headers:
                self.headers._check_headers(pairs)
            if message.value is None:
                raise DeadLetter("tombstone", "null value on a topic that is not compacted")
            try:
                key = None if message.key is None else message.key.decode()
            except UnicodeDecodeError as e:
                raise DeadLetter("decode", f"key is not UTF-8: {e}") from None
            good, bad = split_record(message.value, key, message.partition, parts)
        except DeadLetter as err:
            await self.dead_letter(
                message, pairs, message.key, message.value, err.reason, err.detail
            )
            return []
        for r in bad:
            await self.refuse(message, pairs, r)
        return good

    async def emit(self, out: Outputs[Emitted]) -> None:
        """The core's table writes (the changelog is the checkpoint: a record per bucket of
        workloads, `governor.cores.state_buckets`), then its load windows, queued for
        `send_windows`."""
        if out.checkpoints:  # a checkpoint's (`on`, per workload and batch, has none)
            await self.values.write(out.checkpoints)
        for window in out.records:
            assert isinstance(window, events.LoadWindow)
            self.windows.append(window)
            self.tally.add(self.window_counters[(window.window, window.closed)])
            for v in window.more:
                self.tally.add(self.window_counters[(v.window, v.closed)])

    async def send_windows(self) -> None:
        """The queued load windows, one record batch per partition (under the lock)."""
        windows, self.windows = self.windows, []
        if not windows:
            return
        try:
            if not self.loads_started:
                await self.loads.start()
                self.loads_started = True
            self.load_acks += await self.loads.publish_many(self.load_topic, windows)
        except Exception as exc:
            await self.crash(exc)
            raise

    async def wait_loads(self) -> None:
        """The broker's acks of every load record sent so far (under the lock)."""
        acks, self.load_acks = self.load_acks, []
        try:
            await self.loads.wait(acks)
        except Exception as exc:
            await self.crash(exc)
            raise

    async def crash(self, exc: Exception) -> None:
        """Load records may be lost: stop before another ack or table write, so that the next
        owner replays what they came from (see the docstring)."""
        log.error("load windows not delivered: stopping: %r", exc)
        await self.app.crash(exc)

    def checkpoint_due(self) -> bool:
        """Unacked events, and the interval is up or one is of a partition never acked."""
        if not self.unacked:
            return False
        return self.new_partition or time.monotonic() - self.checkpointed_at >= self.checkpoint_s

    async def checkpoint(self) -> None:
        """Write every changed workload's table value, then ack the events folded into them."""
        async with self.lock:
            # The windows first: the table values written next skip their samples on a replay.
            await self.wait_loads()
            await self.emit(self.core.checkpoint())
            unacked, self.unacked = self.unacked, []
            for event in unacked:
                await self.stream.ack(event)
            self.acked_partitions.update((e.message.topic, e.message.partition) for e in unacked)
            self.new_partition = False
            self.checkpointed_at = time.monotonic()

    def count_samples(self) -> None:
        for outcome, n in self.core.take_counts().items():
            self.tally.add(self.samples[outcome], n)

    async def reseek(self) -> None:
        """Seek again the metrics partitions whose re-fetch did not come (`StreamOrder.due_seeks`):
        a quiet source sends nothing ahead that would ask for it."""
        async with self.lock:
            due = self.order.due_seeks(time.monotonic())
            if due:  # one hand-over to the consumer's thread for all of them
                await self.app.consumer.seek_wait({TP(*tp): offset for tp, offset in due})

    async def publish_dirty(self) -> None:
        SERIES.set(len(self.core.live))
        async with self.lock:  # after the windows of the batch before, in order
            await self.emit(self.core.tick(time.monotonic()))
            await self.send_windows()
        self.tally.flush()

    async def stop(self) -> None:
        """Flush the load records queued (what is not acked yet is replayed anyway)."""
        await self.policies.stop()
        if self.loads_started:
            await self.loads.stop()

    # --- dead letters ------------------------------------------------------------------------

    async def dead_letter(
        self,
        message: Any,
        headers: list[tuple[str, bytes]],
        key: bytes | None,
        value: bytes | None,
        reason: str,
        detail: str,
        extra: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        await self.dlq_topic.send(
            key=key,
            value=value,
            headers=dlq_headers(
                headers, reason, detail, message.topic, message.partition, message.offset, extra
            ),
        )
        SAMPLES.labels("dead_letter").inc()
        DEAD_LETTERS.labels(message.topic, reason).inc()
        log.warning(
            "dead-lettered a sample: %s: %s", reason, detail, extra={"offset": message.offset}
        )

    async def refuse(self, message: Any, headers: list[tuple[str, bytes]], r: Refused) -> None:
        """A sample of a batch, alone: its JSON under the record's key, with its index."""
        await self.dead_letter(
            message,
            headers,
            message.key,
            r.raw,
            r.reason,
            r.detail,
            [(H_DLQ_INDEX, str(r.index).encode())],
        )

    # --- lag ---------------------------------------------------------------------------------

    def observe_lag(self) -> None:
        consumer = self.app.consumer
        owned = [tp for tp in consumer.assignment() if tp.topic == self.s.metrics_topic]
        ends: dict[Any, int | None] = {}
        for tp in owned:
            try:
                ends[tp] = consumer.highwater(tp)
            except Exception:  # not fetched yet (or the consumer is between rebalances)
                ends[tp] = None
        done = {tp: self.handled.get((tp.topic, tp.partition)) for tp in owned}
        record_consumer_lag(self.s.app_id, [self.s.metrics_topic], ends, done)


def follow_policies(app: faust.App, agg: Aggregation) -> None:
    """Each workload's windows from governor.policies, for as long as the app runs."""

    @app.task
    async def follow() -> None:
        await agg.policies.run(agg.s.policies_wait_seconds)


def build_app(s: AggregatorSettings) -> faust.App:
    app = faust_app(s)
    agg = Aggregation(app, s)
    follow_policies(app, agg)

    @app.agent(agg.metrics_topic)
    async def aggregate(stream: Any) -> None:
        # Batches: one fold per workload and batch; events acked (and so committed) only by the
        # checkpoint that wrote the table values they were folded into.
        agg.stream = stream
        within = s.batch_within_ms / 1000
        async for batch in stream.noack_take(s.batch_max_samples, within=within):
            await agg.handle(batch)
            if agg.checkpoint_due():
                await agg.checkpoint()

    @app.timer(interval=0.25)
    async def checkpoint() -> None:
        # Without new batches too (an idle source).
        if agg.checkpoint_due():
            await agg.checkpoint()

    # More often than the interval: the core sends each held series once its own interval is
    # up (`AggregatorCore.tick`), so a held estimate waits at most this much beyond it.
    @app.timer(interval=min(agg.interval, 0.25))
    async def publish_open_windows() -> None:
        await agg.publish_dirty()

    @app.timer(interval=1.0)
    async def observe_lag() -> None:
        agg.observe_lag()

    @app.timer(interval=0.5)
    async def reseek() -> None:
        await agg.reseek()

    app.on_partitions_revoked.connect(lambda app, revoked, **kw: agg.revoked())
    app.on_before_shutdown.connect(lambda app, **kw: agg.stop())

    def ready() -> bool:
        return bool(app.producer.started and not app.rebalancing and app.consumer.assignment())

    @app.task
    async def serve_health() -> None:
        # faust stalls the stream whenever more than 100 sends are buffered (it then waits in
        # 0.1 s steps); table writes go through that buffer. Let it absorb a burst; faust still
        # flushes before committing.
        app.producer.buffer.max_messages = s.producer_buffer_messages
        # faust's own web server is off; /metrics, /healthz, /readyz are the same as elsewhere.
        await HealthServer(s.http_host, s.http_port, ready).start()
        # Start-up's objects (modules, faust's app and services) out of the collector's way;
        # the young threshold is set in start() (governor.gc_tuning says why).
        gc_tuning.freeze_startup()

    return app


def start(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Run the service with the settings `args` name (parsed by governor_aggregator.cli)."""
    settings = service_settings(parser, args, AggregatorSettings, PREFIX)
    gc_tuning.configure()  # as the decider: the per-batch records and windows (gc_tuning)
    app = build_app(settings)
    # faust (mode) configures logging itself: hand it ours, one JSON object per line.
    logging_config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter, "service": "aggregator"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json"}},
        "root": {"handlers": ["stderr"], "level": settings.log_level.upper()},
        "filters": {"slow_tick": {"()": SlowTickAsInfo}},
        "loggers": {"aiokafka": {"level": "CRITICAL"}, "mode.timers": {"filters": ["slow_tick"]}},
    }
    worker = faust.Worker(
        app,
        loglevel=settings.log_level.lower(),
        logging_config=logging_config,
        override_logging=True,
    )
    # At WARNING and above faust keeps its terminal spinner, which sets the root logger to DEBUG
    # so that every debug record (one per message produced) is built and handed to it.
    worker.spinner = None
    worker.execute_from_commandline()
