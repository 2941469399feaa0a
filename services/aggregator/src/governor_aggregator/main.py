"""governor-aggregator: a faust-streaming app turning samples into windowed load.

Per (workload, metric) it keeps a stable window (default 60 s, hopping every 10 s) and a panic
window (default 6 s, hopping every 2 s) over event time, computed by `governor.windows` — the
same code the simulator runs. It publishes a LoadWindow when a window closes, and the running
estimate of the open window at most every `publish_interval_ms`, so a decision never waits for a
whole window.

- Samples are consumed as raw bytes and decoded with governor's codec (`governor.bus`), so the
  dead-letter rule holds here too: undecodable or invalid samples go to governor.metrics.dlq
  with the reason in headers.
- The window state lives in a faust Table with a changelog topic, so a restarted or rebalanced
  worker recovers it. The store is `memory://` by default, `rocksdb://` (rocksdict) as an option.
- Exactly-once windows over at-least-once delivery: the table value carries the last source
  offset applied, so samples redelivered after a crash or a rebalance are skipped. A closed
  window may be published twice then; the decider keeps the newest view of each window.
- faust runs on `governor_aggregator.transport`: its aiokafka transport with a cheaper hand-off
  of each fetched message and a 100 ms fetch wait (faust's 1.5 s held samples up to that long).
  With them a sample's window is out in 0.3 s (p99) at 1,000 samples/s instead of 1.1 s (p50).
  It also delivers each metrics partition in offset order across rebalances, which the offset
  check above relies on: faust alone can deliver records from before a rebalance's seek after
  it, and the records the seek fetches again were then skipped as duplicates.
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import time
import weakref
from typing import Any, Literal

import faust
import msgspec
from aiokafka.partitioner import DefaultPartitioner
from faust.streams import _current_event
from faust.types import TP
from prometheus_client import Counter, Gauge

from governor import events
from governor.bus import (
    DEAD_LETTERS,
    H_DLQ_ERROR,
    H_DLQ_OFFSET,
    H_DLQ_PARTITION,
    H_DLQ_REASON,
    H_DLQ_TOPIC,
    DeadLetter,
    _Decoder,
    codec_for,
    record_consumer_lag,
)
from governor.entry import service_settings
from governor.events import WindowKind
from governor.kafka_security import KafkaSecurity, password, ssl_context
from governor.settings import KafkaSettings
from governor.telemetry import HealthServer, JsonFormatter
from governor.windows import (
    SeriesWindows,
    WindowSpec,
    estimate,
    hopping,
    ingest_many,
    to_load_window,
)
from governor_aggregator.cli import PREFIX
from governor_aggregator.transport import Transport

log = logging.getLogger("governor.aggregator")

SAMPLES = Counter("governor_aggregator_samples_total", "Samples aggregated.", ["outcome"])
WINDOWS = Counter(
    "governor_aggregator_windows_total", "Load windows published.", ["window", "state"]
)
SERIES = Gauge("governor_aggregator_series", "Series (workload, metric, window) held.")


class AggregatorSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    kafka: KafkaSettings = msgspec.field(default_factory=KafkaSettings)
    app_id: str = events.AGGREGATOR_APP_ID
    store: str = "memory://"
    stable_window_seconds: float = 60.0
    stable_hop_seconds: float = 10.0
    panic_window_seconds: float = 6.0
    panic_hop_seconds: float = 2.0
    allowed_lateness_seconds: float = 2.0
    publish_interval_ms: int = 500
    http_host: str = "127.0.0.1"
    http_port: int = 8082
    log_level: str = "INFO"
    data_dir: str = "/tmp/governor-aggregator"
    # Where a NEW consumer group starts. A restarted one resumes from its commits either way;
    # a fresh deployment has no use for the samples retained from before it existed.
    auto_offset_reset: Literal["latest", "earliest"] = "latest"
    producer_buffer_messages: int = 10_000
    # Samples are handled in batches of at most this many, waiting at most this long to fill one.
    batch_max_samples: int = 5_000
    batch_within_ms: int = 10
    # Topic names (same types and keys), for isolated test and benchmark runs.
    metrics_topic: str = events.METRICS.name
    load_topic: str = events.LOAD.name


class MetricWindows(msgspec.Struct, array_like=True):
    """The table value of one (workload, metric): both windows and the last source offset.

    `offset` makes reprocessing idempotent: after a rebalance or a crash the new owner restores
    this value from the changelog and skips every sample at or below it (one key lives in one
    partition, so its offsets only grow) — at-least-once delivery, exactly-once windows.
    """

    offset: int
    stable: SeriesWindows
    panic: SeriesWindows


_STATE_ENC = msgspec.msgpack.Encoder()
_STATE_DEC = msgspec.msgpack.Decoder(MetricWindows)
_LOAD = codec_for(events.LOAD)
_SEP = "\x1f"


def series_key(workload: str, metric: str) -> str:
    return f"{workload}{_SEP}{metric}"


class _Record:
    """The shape governor.bus's decoder reads, from a faust message."""

    __slots__ = ("headers", "key", "offset", "partition", "timestamp", "topic", "value")

    def __init__(self, message: Any) -> None:
        self.topic = message.topic
        self.partition = message.partition
        self.offset = message.offset
        self.key = message.key
        self.value = message.value
        self.timestamp = int((message.timestamp or 0) * 1000)
        raw = message.headers or []
        items = raw.items() if isinstance(raw, dict) else raw
        self.headers = [(k, bytes(v)) for k, v in items]


class AggregatorApp(faust.App):
    """faust's App on governor's aiokafka transport (`governor_aggregator.transport`)."""

    def _new_transport(self) -> Any:
        return Transport(self.conf.broker_consumer, self, loop=self.loop)


def broker_credentials(sec: KafkaSecurity) -> Any:
    """faust's form of the Kafka security settings (None: plaintext)."""
    if sec.protocol == "PLAINTEXT":
        return None
    ctx = ssl_context(sec) if sec.tls else None
    if not sec.sasl:
        return faust.SSLCredentials(ctx)
    return faust.SASLCredentials(
        username=sec.username, password=password(sec), ssl_context=ctx, mechanism=sec.mechanism
    )


def build_app(s: AggregatorSettings) -> faust.App:
    app = AggregatorApp(
        s.app_id,
        broker=f"kafka://{s.kafka.bootstrap}",
        broker_credentials=broker_credentials(s.kafka.security),
        store=s.store,
        datadir=s.data_dir,
        topic_partitions=events.METRICS.partitions,
        topic_allow_declare=True,
        web_enabled=False,
        producer_acks=-1,
        # Batch produce requests (changelog + windows): one request per message costs more
        # than everything else the worker does.
        # 20 ms, not 5: each produce request is a socket write, and at 1,000 samples/s the writes
        # of 5 ms batches were a tenth of the worker's CPU.
        producer_linger=0.02,
        producer_max_batch_size=256 * 1024,
        consumer_auto_offset_reset=s.auto_offset_reset,
        # faust commits inline in its fetch loop every `broker_commit_every` acked messages (a
        # producer flush and an offset commit, fetching stalled meanwhile): at 200 that was
        # several stalls a second at 1,000 samples/s. Commit on the 1 s timer instead.
        broker_commit_every=100_000,
        broker_commit_interval=1.0,
        table_cleanup_interval=60.0,
        # Everything is bytes encoded by governor's codecs; faust's own (JSON) codec would also
        # be used to read the changelog back during recovery, so it must be raw everywhere.
        key_serializer="raw",
        value_serializer="raw",
    )
    specs: dict[str, WindowSpec] = {
        "stable": hopping(
            s.stable_window_seconds, s.stable_hop_seconds, s.allowed_lateness_seconds
        ),
        "panic": hopping(s.panic_window_seconds, s.panic_hop_seconds, s.allowed_lateness_seconds),
    }
    raw = {"key_serializer": "raw", "value_serializer": "raw"}
    metrics_topic = app.topic(s.metrics_topic, key_type=bytes, value_type=bytes, **raw)
    dlq_topic = app.topic(f"{s.metrics_topic}.dlq", **raw)
    table = app.Table(
        events.AGGREGATOR_TABLE,
        default=None,
        partitions=events.METRICS.partitions,
        key_type=bytes,
        value_type=bytes,
    )
    changelog = table.changelog_topic.get_topic_name()
    table_data: Any = table.data
    decoder = _Decoder(events.METRICS)
    dirty: dict[str, MetricWindows] = {}
    # Next offset to handle per metrics partition (governor_bus_consumer_lag).
    handled: dict[tuple[str, int], int] = {}

    # Per series: when its open-window estimates were last published (monotonic) and what they
    # were ((start, count) of the stable and the panic estimate), so an unchanged estimate is
    # not sent again and a series is published at most every publish_interval_ms.
    interval = s.publish_interval_ms / 1000.0
    published_at: dict[str, float] = {}
    published: dict[str, tuple[tuple[float, int], ...]] = {}
    producer_headers = list(_LOAD.headers)
    encode_load = _LOAD.encode
    window_counters = {
        (kind, closed): WINDOWS.labels(kind, "closed" if closed else "open")
        for kind in ("stable", "panic")
        for closed in (True, False)
    }
    # The memory store holds each series' state as the object itself (decoding 2.5 KB of
    # windows per sample was a tenth of the worker's time); a rocksdb store needs bytes. What
    # recovery restores from the changelog is bytes in either case.
    objects_in_store = s.store.startswith("memory")

    # Partition per workload on the load topic, computed once per workload with the partitioner
    # every producer of the topic uses (aiokafka's murmur2 is pure Python, per message).
    load_partition: dict[str, int] = {}
    partitioner = DefaultPartitioner()

    async def load_partition_of(aio: Any, workload: str, key: bytes) -> int:
        partition = load_partition.get(workload)
        if partition is None:
            await aio.client._wait_on_metadata(s.load_topic)
            parts = sorted(aio.client.cluster.partitions_for_topic(s.load_topic))
            partition = load_partition[workload] = partitioner(key, parts, parts)
        return partition

    async def publish(window: events.LoadWindow) -> None:
        # Straight into the Kafka producer, without faust's wrapper and buffer task: faust
        # flushes this producer before it commits source offsets, and events are acked only
        # after their batch was handled, so a window is sent before its samples are committed.
        aio = app.producer._ensure_producer()  # type: ignore[attr-defined]
        key = window.workload.encode()
        await aio.send(
            s.load_topic,
            encode_load(window),
            key=key,
            partition=await load_partition_of(aio, window.workload, key),
            headers=producer_headers,
        )
        window_counters[(window.window, window.closed)].inc()

    async def store(key: bytes, state: MetricWindows, partition: int) -> None:
        """The table write of one series: the store, then its changelog record on the source
        partition (what faust's Table does on `table[key] = value`, without its per-message
        buffer task; faust flushes the producer before committing source offsets)."""
        value = _STATE_ENC.encode(state)
        table_data[key] = state if objects_in_store else value
        aio = app.producer._ensure_producer()  # type: ignore[attr-defined]
        fut = await aio.send(changelog, value, key=key, partition=partition)
        if not objects_in_store:
            fut.add_done_callback(functools.partial(persisted, partition))

    def persisted(partition: int, fut: Any) -> None:
        # What faust's Table does when a changelog record is acknowledged: a rocksdb store keeps
        # the offset so that recovery starts from there.
        if not fut.cancelled() and fut.exception() is None:
            table.data.set_persisted_offset(TP(changelog, partition), fut.result().offset)

    def load_state(kb: bytes) -> MetricWindows:
        stored = table_data.get(kb)
        if stored is None:
            return new_state()
        if isinstance(stored, MetricWindows):
            return stored
        return _STATE_DEC.decode(stored)

    async def publish_open(key: str, state: MetricWindows) -> None:
        """The open windows' running estimates of one series, those that changed."""
        workload, metric = key.split(_SEP)
        before = published.get(key, ())
        sig: list[tuple[float, int]] = []
        kinds: tuple[tuple[WindowKind, SeriesWindows], ...] = (
            ("stable", state.stable),
            ("panic", state.panic),
        )
        for i, (kind, series) in enumerate(kinds):
            newest = series.newest if series.newest is not None else time.time()
            acc = estimate(series, newest)
            sig.append((acc.start, acc.count) if acc is not None else (-1.0, 0))
            if acc is not None and (len(before) <= i or before[i] != sig[i]):
                await publish(to_load_window(acc, workload, metric, kind, closed=False))
        published[key] = tuple(sig)
        published_at[key] = time.monotonic()

    async def dead_letter(rec: _Record, err: DeadLetter) -> None:
        await dlq_topic.send(
            key=rec.key,
            value=rec.value,
            headers=[
                *rec.headers,
                (H_DLQ_REASON, err.reason.encode()),
                (H_DLQ_ERROR, err.detail[:1000].encode()),
                (H_DLQ_TOPIC, rec.topic.encode()),
                (H_DLQ_PARTITION, str(rec.partition).encode()),
                (H_DLQ_OFFSET, str(rec.offset).encode()),
            ],
        )
        SAMPLES.labels("dead_letter").inc()
        DEAD_LETTERS.labels(rec.topic, err.reason).inc()
        log.warning("dead-lettered a sample: %s", err, extra={"offset": rec.offset})

    def new_state() -> MetricWindows:
        return MetricWindows(
            -1, SeriesWindows(spec=specs["stable"]), SeriesWindows(spec=specs["panic"])
        )

    samples_ok, samples_late, samples_dup = (
        SAMPLES.labels("ok"),
        SAMPLES.labels("late"),
        SAMPLES.labels("duplicate"),
    )
    value_of = decoder.value_of

    async def handle(batch: list[Any]) -> None:
        """One batch of events: per partition, per series, all its samples in one fold and one
        table write; then the open estimates of the series touched."""
        by_partition: dict[int, list[Any]] = {}
        for event in batch:
            by_partition.setdefault(event.message.partition, []).append(event)
        touched: dict[str, MetricWindows] = {}
        for partition, events_ in by_partition.items():
            samples: dict[str, list[tuple[int, events.MetricSample]]] = {}
            for event in events_:
                message = event.message
                handled[(message.topic, partition)] = message.offset + 1
                sample = value_of(message.value, message.key, message.headers)
                if sample is None:
                    # The slow path says why (or accepts what the fast one would not).
                    rec = _Record(message)
                    try:
                        sample = decoder(rec).value
                    except DeadLetter as err:
                        await dead_letter(rec, err)
                        continue
                assert sample is not None
                key = series_key(sample.workload, sample.metric)
                items = samples.get(key)
                if items is None:
                    items = samples[key] = []
                items.append((message.offset, sample))
            if not samples:
                continue
            # faust's Table takes the changelog partition (and a rocksdb store its shard) from
            # the current event: every key written here came from this partition.
            token = _current_event.set(weakref.ref(events_[-1]))
            try:
                for key, items in samples.items():
                    kb = key.encode()
                    state = load_state(kb)
                    fresh = [(off, smp) for off, smp in items if off > state.offset]
                    if len(fresh) < len(items):
                        samples_dup.inc(len(items) - len(fresh))
                    if not fresh:
                        continue
                    pairs = [(smp.timestamp, smp.value) for _, smp in fresh]
                    stable, closed_stable, late = ingest_many(state.stable, pairs)
                    panic, closed_panic, _ = ingest_many(state.panic, pairs)
                    state = MetricWindows(fresh[-1][0], stable, panic)
                    await store(kb, state, partition)
                    touched[key] = state
                    smp = fresh[-1][1]
                    for kind, closed in (("stable", closed_stable), ("panic", closed_panic)):
                        for acc in closed:
                            await publish(
                                to_load_window(acc, smp.workload, smp.metric, kind, closed=True)
                            )
                    if late:
                        samples_late.inc(late)
                    if len(pairs) > late:
                        samples_ok.inc(len(pairs) - late)
            finally:
                _current_event.reset(token)
        # Open estimates now rather than on the next timer tick (that wait was most of the
        # sample-to-decision latency); a series published less than publish_interval_ms ago
        # waits for the timer, so the rate per series stays bounded.
        now = time.monotonic()
        for key, state in touched.items():
            if now - published_at.get(key, -math.inf) >= interval:
                dirty.pop(key, None)
                await publish_open(key, state)
            else:
                dirty[key] = state

    @app.agent(metrics_topic)
    async def aggregate(stream: Any) -> None:
        # Batches: one fold and one changelog write per series and batch, events acked (and so
        # committed) only after their batch was handled.
        async for batch in stream.take_events(s.batch_max_samples, within=s.batch_within_ms / 1000):
            await handle(batch)

    @app.timer(interval=interval)
    async def publish_open_windows() -> None:
        SERIES.set(len(table))
        if not dirty:
            return
        pending = list(dirty.items())
        dirty.clear()
        for key, state in pending:
            await publish_open(key, state)

    @app.timer(interval=1.0)
    async def observe_lag() -> None:
        consumer = app.consumer
        owned = [tp for tp in consumer.assignment() if tp.topic == s.metrics_topic]
        ends: dict[Any, int | None] = {}
        for tp in owned:
            try:
                ends[tp] = consumer.highwater(tp)
            except Exception:  # not fetched yet (or the consumer is between rebalances)
                ends[tp] = None
        done = {tp: handled.get((tp.topic, tp.partition)) for tp in owned}
        record_consumer_lag(s.app_id, [s.metrics_topic], ends, done)

    def ready() -> bool:
        return bool(app.producer.started and not app.rebalancing and app.consumer.assignment())

    @app.task
    async def serve_health() -> None:
        # faust stalls the stream whenever more than 100 sends are buffered (it then waits in
        # 0.1 s steps): at one changelog write and ~2.6 windows per sample that is every few
        # dozen samples. Let the buffer absorb a burst; faust still flushes before committing.
        app.producer.buffer.max_messages = s.producer_buffer_messages
        # faust's own web server is off; /metrics, /healthz, /readyz are the same as elsewhere.
        await HealthServer(s.http_host, s.http_port, ready).start()

    return app


def start(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Run the service with the settings `args` name (parsed by governor_aggregator.cli)."""
    settings = service_settings(parser, args, AggregatorSettings, PREFIX)
    app = build_app(settings)
    # faust (mode) configures logging itself: hand it ours, one JSON object per line.
    logging_config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter, "service": "aggregator"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json"}},
        "root": {"handlers": ["stderr"], "level": settings.log_level.upper()},
        "loggers": {"aiokafka": {"level": "CRITICAL"}},
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
