"""The typed bus: msgspec events over Kafka (aiokafka), one codec per topic, dead letters.

Producing::

    async with Producer(bootstrap) as producer:
        await producer.send(METRICS, sample)             # waits for the broker's ack
        fut = await producer.publish(METRICS, sample)    # queues; await fut for the ack

Consuming (at-least-once: offsets are committed only after the handler returned)::

    consumer = Consumer(bootstrap, [DECISIONS], group_id="actuator")
    await consumer.start()
    await consumer.run(handle)            # or run_batches(handle_many), or poll() + commit()
    await consumer.stop()                 # commits what was processed, flushes the DLQ producer

Wire format. Every topic of `governor.events.TOPICS` carries one msgspec type encoded as JSON
(`content-type: application/json`, `schema-version: <events.SCHEMA_VERSION>` headers). JSON
because the topics are a public contract: readable with kcat or the console consumer and from
any language, with a JSON Schema per topic (`governor schema export`); msgspec's JSON decoder is
fast enough that the codec is not the bottleneck (bench/bus_throughput.py measures it against
msgpack). The key is the topic's key function applied to the value (workload, pool, node, ...),
so per-key order holds: one key, one partition, and a consumer handles one partition's messages
in offset order.

Producer. Idempotent (`enable_idempotence=True`, `acks="all"`): the broker drops duplicates of a
retried batch, so a retry never reorders or duplicates within a partition. `linger_ms` and
`max_batch_size` are set for throughput with low latency (5 ms, 256 KiB).

Consumer. Manual commits after processing: a crash or a restart redelivers what was not yet
committed, never loses it. So every consumer must tolerate seeing a message twice, and each does:

* decisions and actuations carry a per-workload `seq` (and a `decision_id`): the actuator applies a
  decision only if its seq is newer than the one stored on the target (the fenced JSON patch),
  so a redelivered decision is a no-op;
* samples and load windows are keyed by (workload, metric, window, event time): re-adding a
  redelivered sample to its window overwrites the same slot rather than counting twice (the
  aggregator dedups on that key); a repeated recommendation is recomputed to the same value;
* compacted topics (policies, workloads, cluster) are tables: last write per key wins and a
  tombstone (null value) deletes, so applying a message twice leaves the same state.

Dead letters. A message that cannot be turned into its topic's type goes, with its original key,
value and headers, to `<topic>.dlq` with headers `governor-dlq-reason` (one of `DlqReason`),
`governor-dlq-error` (the decoder's message), `governor-dlq-topic`, `governor-dlq-partition`,
`governor-dlq-offset`; the counter `governor_bus_dead_letters_total{topic,reason}` counts them
and consumption goes on. The DLQ send is acknowledged before the bad message's offset is
committed, so nothing is dropped silently. A handler that raises is treated the same way
(reason `handler`, unless `handler_errors="raise"`), so a poison message cannot wedge a partition.

Throughput. `run_batches()` hands a partition's fetched messages to one handler call and is the
shape for high-volume topics (metrics, load); `run()` awaits the handler once per message, which
costs a coroutine call each and suits the low-volume ones (decisions, actuations). The
bench (`bench/bus_throughput.py`) compares both with a plain aiokafka loop.

Broker unavailable. `start()` retries with bounded exponential backoff (0.1 s doubling to 5 s,
`start_timeout_s` in all) and then raises `BusUnavailable` naming the address. `ready` is what a
health endpoint reports. `stop()` flushes the producer and commits what was processed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, Literal, TypeVar

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
)
from prometheus_client import Counter, Gauge

from governor.events import SCHEMA_VERSION, Topic
from governor.kafka_security import KafkaSecurity, aiokafka_options

__all__ = [
    "CONTENT_TYPE",
    "DEAD_LETTERS",
    "BusUnavailable",
    "Codec",
    "Consumer",
    "DlqReason",
    "Message",
    "Producer",
    "codec_for",
    "consumer_lag",
    "default_bootstrap",
    "read_table",
    "record_consumer_lag",
]

log = logging.getLogger("governor.bus")

T = TypeVar("T", bound=msgspec.Struct)

CONTENT_TYPE = "application/json"
H_CONTENT_TYPE = "content-type"
H_SCHEMA_VERSION = "schema-version"
H_DLQ_REASON = "governor-dlq-reason"
H_DLQ_ERROR = "governor-dlq-error"
H_DLQ_TOPIC = "governor-dlq-topic"
H_DLQ_PARTITION = "governor-dlq-partition"
H_DLQ_OFFSET = "governor-dlq-offset"
# A refused sample of a MetricBatch record: its index in the batch's samples.
H_DLQ_INDEX = "governor-dlq-index"

DlqReason = Literal[
    "decode",  # not JSON (or not UTF-8, truncated, ...)
    "validation",  # JSON, but not the topic's type (msgspec or __post_init__ said no)
    "schema_version",  # a schema-version header other than ours: a breaking change's message
    "content_type",  # a content-type header other than application/json
    "key",  # the record's key is not the topic's key of its value (would break per-key order)
    "tombstone",  # a null value on a topic that is not compacted
    "handler",  # the handler raised on it
]

DEAD_LETTERS = Counter(
    "governor_bus_dead_letters",
    "Messages sent to <topic>.dlq, by source topic and reason.",
    ["topic", "reason"],
)
CONSUMED = Counter(
    "governor_bus_consumed_messages",
    "Messages consumed and handed to a handler, by topic.",
    ["topic"],
)
CONSUMER_LAG = Gauge(
    "governor_bus_consumer_lag",
    "Messages between the next one this process will handle and the partition's end (last "
    "stable offset), summed over the partitions it owns, by topic and consumer group (a "
    "group-less table reader: its client id).",
    ["topic", "group"],
)

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def default_bootstrap() -> str:
    """`GOVERNOR_KAFKA_BOOTSTRAP`, else the local broker's address."""
    return os.environ.get("GOVERNOR_KAFKA_BOOTSTRAP", DEFAULT_BOOTSTRAP)


class BusUnavailable(ConnectionError):
    """Kafka did not answer within the start timeout."""


# --- codec ------------------------------------------------------------------------------------


class Codec(Generic[T]):
    """JSON (msgspec) for one topic's type; the headers every message of the topic carries."""

    __slots__ = ("_decoder", "_encoder", "header_list", "headers", "type")

    content_type = CONTENT_TYPE

    def __init__(self, type_: type[T]) -> None:
        self.type = type_
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(type_)
        self.headers: tuple[tuple[str, bytes], ...] = (
            (H_CONTENT_TYPE, CONTENT_TYPE.encode()),
            (H_SCHEMA_VERSION, str(SCHEMA_VERSION).encode()),
        )
        # aiokafka's C record builder wants a list; it only reads it, so one list is shared.
        self.header_list: list[tuple[str, bytes]] = list(self.headers)

    def encode(self, value: T) -> bytes:
        return self._encoder.encode(value)

    def decode(self, data: bytes) -> T:
        return self._decoder.decode(data)


_CODECS: dict[str, Codec[Any]] = {}


def codec_for(topic: Topic[T]) -> Codec[T]:
    c = _CODECS.get(topic.name)
    if c is None or c.type is not topic.type:
        c = _CODECS[topic.name] = Codec(topic.type)
    return c


class DeadLetter(Exception):
    """Why a record could not become its topic's type."""

    def __init__(self, reason: DlqReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: DlqReason = reason
        self.detail = detail


class Message(msgspec.Struct, Generic[T], frozen=True, gc=False):
    """A decoded record. `value` is None for a tombstone (compacted topics only)."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: T | None
    timestamp_ms: int


class _Decoder(Generic[T]):
    """Record -> Message for one topic, or DeadLetter."""

    __slots__ = ("_check_key", "_decode", "_expected_headers", "_key", "compacted", "name")

    def __init__(self, topic: Topic[T], check_key: bool = True) -> None:
        codec = codec_for(topic)
        self.name = topic.name
        self._decode = codec._decoder.decode
        self._key = topic.key
        self._expected_headers = codec.headers
        self._check_key = check_key
        self.compacted = topic.compacted

    def _check_headers(self, headers: Sequence[tuple[str, bytes]]) -> None:
        for k, v in headers:
            if k == H_SCHEMA_VERSION and v != self._expected_headers[1][1]:
                raise DeadLetter(
                    "schema_version",
                    f"schema-version {v!r}, this reader understands {SCHEMA_VERSION}",
                )
            if k == H_CONTENT_TYPE and v != self._expected_headers[0][1]:
                raise DeadLetter("content_type", f"content-type {v!r}, expected {CONTENT_TYPE}")

    def value_of(self, raw: bytes | None, key: bytes | None, headers: Any) -> T | None:
        """The value of a well-formed record (a value, a UTF-8 key matching it, the expected
        headers), else None: `__call__` then says what is wrong, or accepts what this quick
        check does not (extra headers). Consumer's own loop inlines the same check."""
        if raw is None or key is None or (headers and tuple(headers) != self._expected_headers):
            return None
        try:
            value = self._decode(raw)
            ok = not self._check_key or self._key(value) == key.decode()
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None
        return value if ok else None

    def __call__(self, rec: Any) -> Message[T]:
        headers = rec.headers
        if headers and headers != self._expected_headers:
            self._check_headers(headers)
        kb = rec.key
        try:
            key = None if kb is None else kb.decode()
        except UnicodeDecodeError as e:
            raise DeadLetter("decode", f"key is not UTF-8: {e}") from None
        raw = rec.value
        if raw is None:
            if not self.compacted:
                raise DeadLetter("tombstone", "null value on a topic that is not compacted")
            if key is None:
                raise DeadLetter("tombstone", "tombstone without a key")
            value = None
        else:
            try:
                value = self._decode(raw)
            except msgspec.ValidationError as e:
                raise DeadLetter("validation", str(e)) from None
            except msgspec.DecodeError as e:
                raise DeadLetter("decode", str(e)) from None
            except UnicodeDecodeError as e:  # msgspec raises it for a string that is not UTF-8
                raise DeadLetter("decode", f"not UTF-8: {e}") from None
            if self._check_key and key is not None:
                want = self._key(value)
                if want != key:
                    raise DeadLetter("key", f"record key {key!r}, value's key {want!r}")
        return Message(rec.topic, rec.partition, rec.offset, key, value, rec.timestamp)


# --- start with backoff -----------------------------------------------------------------------

_Client = TypeVar("_Client", AIOKafkaProducer, AIOKafkaConsumer)


async def _start(
    make: Callable[[], _Client], what: str, bootstrap: str, timeout_s: float
) -> _Client:
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    attempt = 0
    while True:
        attempt += 1
        client = make()
        try:
            await client.start()
            if attempt > 1:
                log.info("%s connected to %s after %d attempts", what, bootstrap, attempt)
            return client
        except (KafkaConnectionError, KafkaError, OSError) as e:
            with contextlib.suppress(Exception):
                await client.stop()
            left = deadline - time.monotonic()
            if left <= 0:
                raise BusUnavailable(
                    f"{what}: Kafka at {bootstrap} did not answer within {timeout_s:.0f}s "
                    f"({type(e).__name__}: {e}). Is it up? `governor dev kafka up` starts a "
                    f"local broker; GOVERNOR_KAFKA_BOOTSTRAP names another."
                ) from e
            log.warning(
                "%s: Kafka at %s not available (%s); retrying in %.1fs", what, bootstrap, e, delay
            )
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, 5.0)


def _connected(client: Any) -> bool:
    """Whether aiokafka holds a live connection to some broker (best effort, private API)."""
    try:
        return any(conn.connected() for conn in client._conns.values())
    except Exception:  # pragma: no cover - aiokafka internals moved
        return True


# --- producer ---------------------------------------------------------------------------------


class Producer:
    """Typed, idempotent producer. Keys come from the topic's key function."""

    def __init__(
        self,
        bootstrap: str | None = None,
        *,
        client_id: str = "governor",
        linger_ms: int = 5,
        max_batch_size: int = 256 * 1024,
        compression_type: str | None = None,
        request_timeout_ms: int = 40_000,
        start_timeout_s: float = 60.0,
        security: KafkaSecurity | None = None,
        **aiokafka_kwargs: Any,
    ) -> None:
        self.bootstrap = bootstrap or default_bootstrap()
        # Kafka security (governor.kafka_security): None = GOVERNOR_KAFKA_* (plaintext if unset)
        self.security = security
        self._options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            **aiokafka_options(security),
            "client_id": client_id,
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": linger_ms,
            "max_batch_size": max_batch_size,
            "compression_type": compression_type,
            "request_timeout_ms": request_timeout_ms,
            **aiokafka_kwargs,
        }
        self._start_timeout_s = start_timeout_s
        self._producer: AIOKafkaProducer | None = None
        self._stopped = False
        self._last_ok = 0.0

    async def start(self) -> None:
        if self._producer is not None:
            return
        self._producer = await _start(
            lambda: AIOKafkaProducer(**self._options),
            "producer",
            self.bootstrap,
            self._start_timeout_s,
        )
        self._stopped = False
        self._last_ok = time.monotonic()

    @property
    def ready(self) -> bool:
        """Started, not stopped, and connected to a broker (or acked a send in the last 30 s)."""
        p = self._producer
        if p is None or self._stopped:
            return False
        return _connected(p.client) or time.monotonic() - self._last_ok < 30

    def _p(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise RuntimeError("Producer not started: await producer.start() first")
        return self._producer

    async def publish(self, topic: Topic[T], value: T) -> asyncio.Future[Any]:
        """Queue `value` on `topic` keyed by the topic's key; returns a future for the ack
        (RecordMetadata). Waits only when the producer's buffer is full."""
        codec = codec_for(topic)
        return await self._p().send(  # type: ignore[no-any-return]
            topic.name,
            codec.encode(value),
            key=topic.key(value).encode(),
            headers=codec.header_list,
        )

    async def send(self, topic: Topic[T], value: T) -> Any:
        """Send and wait for the broker's ack (all in-sync replicas). Returns RecordMetadata."""
        meta = await (await self.publish(topic, value))
        self._last_ok = time.monotonic()
        return meta

    async def wait(self, acks: Iterable[Awaitable[Any] | None]) -> list[Any]:
        """Wait for the acks of several `publish` calls at once (one round trip, not one each);
        raises the first send error. None entries (nothing sent) are skipped. Returns the
        RecordMetadata of the others, in order."""
        pending = [a for a in acks if a is not None]
        if not pending:
            return []
        metas = await asyncio.gather(*pending)
        self._last_ok = time.monotonic()
        return metas

    async def tombstone(self, topic: Topic[Any], key: str) -> Any:
        """Delete `key` from a compacted topic (a null value); waits for the ack."""
        if not topic.compacted:
            raise ValueError(f"{topic.name} is not compacted: a tombstone would be dead-lettered")
        fut = await self._p().send(
            topic.name, None, key=key.encode(), headers=codec_for(topic).header_list
        )
        meta = await fut
        self._last_ok = time.monotonic()
        return meta

    async def send_raw(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> asyncio.Future[Any]:
        """Queue raw bytes (dead letters, batch records, tools, tests), to `partition` if
        given (else the key's). Returns a future for the ack."""
        return await self._p().send(  # type: ignore[no-any-return]
            topic, value, key=key, headers=list(headers), partition=partition
        )

    async def partition_count(self, topic: str) -> int:
        """How many partitions `topic` has (waits for its metadata)."""
        return len(await self._p().partitions_for(topic))

    async def flush(self) -> None:
        if self._producer is not None:
            await self._producer.flush()
            self._last_ok = time.monotonic()

    async def stop(self) -> None:
        """Flush what is queued, then close."""
        p, self._producer = self._producer, None
        self._stopped = True
        if p is not None:
            try:
                await p.flush()
            finally:
                await p.stop()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


# --- consumer ---------------------------------------------------------------------------------

Handler = Callable[[Message[Any]], Awaitable[None]]
BatchHandler = Callable[[list[Message[Any]]], Awaitable[None]]


class _Revoker(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, consumer: Consumer) -> None:
        self._c = consumer

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._c._commit_partitions(set(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        return None


class Consumer:
    """Typed consumer with manual commits after processing and a dead-letter queue.

    With `group_id=None` it reads every partition of its topics from the beginning and commits
    nothing: the shape of a global table (policies, workloads, cluster) that each decider reads
    in full.
    """

    def __init__(
        self,
        bootstrap: str | None,
        topics: Sequence[Topic[Any]],
        *,
        group_id: str | None,
        client_id: str = "governor",
        auto_offset_reset: Literal["earliest", "latest"] = "earliest",
        max_poll_records: int = 2000,
        dlq_producer: Producer | None = None,
        handler_errors: Literal["dlq", "raise"] = "dlq",
        check_keys: bool = True,
        start_timeout_s: float = 60.0,
        security: KafkaSecurity | None = None,
        **aiokafka_kwargs: Any,
    ) -> None:
        if not topics:
            raise ValueError("Consumer needs at least one topic")
        self.bootstrap = bootstrap or default_bootstrap()
        self.group_id = group_id
        self.topics = list(topics)
        self._decoders: dict[str, _Decoder[Any]] = {
            t.name: _Decoder(t, check_keys) for t in self.topics
        }
        self.security = security
        self._options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            **aiokafka_options(security),
            "client_id": client_id,
            "group_id": group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": auto_offset_reset,
            "max_poll_records": max_poll_records,
            "isolation_level": "read_committed",
            # aiokafka leaves a partition whose records are still buffered out of the fetch in
            # flight; new records on it then wait for that fetch to return, which an idle topic
            # holds at the broker for up to this long (aiokafka's default 500 ms was most of the
            # decider's p99 at 1,000 workloads).
            "fetch_max_wait_ms": 100,
            **aiokafka_kwargs,
        }
        self._start_timeout_s = start_timeout_s
        self._consumer: AIOKafkaConsumer | None = None
        self._dlq = dlq_producer
        self._own_dlq = dlq_producer is None
        self._handler_errors = handler_errors
        # next offset to commit per partition: everything before it was processed (or DLQ'd)
        self._processed: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._stopping = False
        self._running: asyncio.Event | None = None

    # lifecycle

    async def start(self) -> None:
        if self._consumer is not None:
            return
        if self._dlq is None:
            self._dlq = Producer(
                self.bootstrap,
                client_id=f"{self._options['client_id']}-dlq",
                security=self.security,
            )
        await self._dlq.start()

        def make() -> AIOKafkaConsumer:
            return AIOKafkaConsumer(**self._options)

        consumer = await _start(make, "consumer", self.bootstrap, self._start_timeout_s)
        names = [t.name for t in self.topics]
        if self.group_id is None:
            tps = []
            for name in names:
                parts = consumer.partitions_for_topic(name)
                if not parts:
                    await consumer._client._wait_on_metadata(name)
                    parts = consumer.partitions_for_topic(name) or set()
                tps += [TopicPartition(name, p) for p in sorted(parts)]
            consumer.assign(tps)
        else:
            consumer.subscribe(names, listener=_Revoker(self))
        self._consumer = consumer
        self._stopping = False

    @property
    def ready(self) -> bool:
        """Started, not stopping, and connected to a broker."""
        c = self._consumer
        return c is not None and not self._stopping and _connected(c._client)

    def request_stop(self) -> None:
        """Ask `run()`/`run_batches()` to return after the message (batch) in hand; what was
        handled is committed on the way out. `stop()` then closes the consumer."""
        self._stopping = True

    async def stop(self) -> None:
        """Stop `run()`, commit what was processed, close (and flush the DLQ producer)."""
        self._stopping = True
        if self._running is not None:
            await self._running.wait()
        c, self._consumer = self._consumer, None
        try:
            if c is not None:
                try:
                    await self._commit(c)
                finally:
                    await c.stop()
        finally:
            if self._own_dlq and self._dlq is not None:
                await self._dlq.stop()
                self._dlq = None

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _c(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("Consumer not started: await consumer.start() first")
        return self._consumer

    # commits

    async def commit(self) -> None:
        """Commit everything processed so far (for poll() users: everything poll() returned)."""
        await self._commit(self._c())

    async def _commit(self, c: AIOKafkaConsumer) -> None:
        if self.group_id is None:
            return
        todo = {tp: off for tp, off in self._processed.items() if self._committed.get(tp) != off}
        if not todo:
            return
        assigned = c.assignment()
        todo = {tp: off for tp, off in todo.items() if tp in assigned}
        if not todo:
            return
        try:
            await c.commit(todo)
            self._committed.update(todo)
        except (CommitFailedError, IllegalStateError) as e:
            # A rebalance took partitions away: their new owner resumes from the last commit
            # (at-least-once), so this is not a loss.
            log.warning("commit of %s failed (%s); the new owner will redo them", todo, e)

    async def _commit_partitions(self, tps: set[TopicPartition]) -> None:
        c = self._consumer
        if c is None or self.group_id is None:
            return
        todo = {
            tp: off
            for tp, off in self._processed.items()
            if tp in tps and self._committed.get(tp) != off
        }
        if todo:
            try:
                await c.commit(todo)
            except (CommitFailedError, IllegalStateError) as e:
                log.warning("commit on revoke failed (%s)", e)
        for tp in tps:
            self._processed.pop(tp, None)
            self._committed.pop(tp, None)

    # dead letters

    async def _dead_letter(self, rec: Any, reason: DlqReason, detail: str) -> None:
        """Send the raw record to `<topic>.dlq` with why, wait for the ack, count it."""
        dlq = self._dlq
        assert dlq is not None
        headers = [
            *(rec.headers or ()),
            (H_DLQ_REASON, reason.encode()),
            (H_DLQ_ERROR, detail[:1000].encode("utf-8", "replace")),
            (H_DLQ_TOPIC, rec.topic.encode()),
            (H_DLQ_PARTITION, str(rec.partition).encode()),
            (H_DLQ_OFFSET, str(rec.offset).encode()),
        ]
        target = f"{rec.topic}.dlq"
        # Acked before the offset can be committed: a dead letter is never lost on the way.
        delay = 0.2
        while True:
            try:
                fut = await dlq.send_raw(target, rec.value, key=rec.key, headers=headers)
                await fut
                break
            except KafkaError as e:
                log.warning("dead letter to %s failed (%s); retrying in %.1fs", target, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        DEAD_LETTERS.labels(rec.topic, reason).inc()
        log.warning(
            "dead letter: %s[%d]@%d -> %s (%s: %s)",
            rec.topic,
            rec.partition,
            rec.offset,
            target,
            reason,
            detail[:200],
        )

    # reading

    async def _fetch(self, timeout_ms: int) -> list[tuple[TopicPartition, list[Any]]]:
        c = self._c()
        batches = await c.getmany(timeout_ms=timeout_ms)
        return list(batches.items())

    async def _decode_partition(self, tp: TopicPartition, records: list[Any]) -> list[Message[Any]]:
        """Decode one partition's records in order; dead-letter the bad ones. The hot path is
        inlined: this loop is most of the bus's cost per message."""
        dec = self._decoders[tp.topic]
        decode = dec._decode
        key_of = dec._key if dec._check_key else None
        expected = dec._expected_headers
        topic, partition = tp.topic, tp.partition
        out: list[Message[Any]] = []
        append = out.append
        for rec in records:
            raw = rec.value
            kb = rec.key
            if raw is not None and kb is not None and rec.headers == expected:
                try:
                    value = decode(raw)
                    key = kb.decode()
                except (msgspec.DecodeError, UnicodeDecodeError):
                    pass  # the slow path below says why
                else:
                    if key_of is None or key_of(value) == key:
                        append(Message(topic, partition, rec.offset, key, value, rec.timestamp))
                        continue
            try:
                append(dec(rec))
            except DeadLetter as dl:
                # Not marked processed here: good messages before it may still be unhandled.
                # The caller marks the batch once its handler got through it.
                await self._dead_letter(rec, dl.reason, dl.detail)
        return out

    async def poll(self, timeout_ms: int = 1000) -> list[Message[Any]]:
        """The next decoded messages, partition by partition in offset order (bad ones are
        already dead-lettered). Everything returned counts as processed for the next commit()."""
        out: list[Message[Any]] = []
        for tp, records in await self._fetch(timeout_ms):
            good = await self._decode_partition(tp, records)
            out += good
            if records:
                self._processed[tp] = records[-1].offset + 1
            if good:
                CONSUMED.labels(tp.topic).inc(len(good))
        return out

    async def run(self, handler: Handler, *, poll_timeout_ms: int = 500) -> None:
        """Handle messages one at a time until stop(); commit after each fetched batch."""

        async def per_partition(
            tp: TopicPartition, msgs: list[Message[Any]], records: list[Any]
        ) -> None:
            processed = self._processed
            for msg in msgs:
                if self._stopping:
                    return
                try:
                    await handler(msg)
                except Exception as e:
                    await self._handler_failed(msg, records, e)
                processed[tp] = msg.offset + 1
            processed[tp] = records[-1].offset + 1  # dead letters after the last good one

        await self._loop(per_partition, poll_timeout_ms)

    async def run_batches(self, handler: BatchHandler, *, poll_timeout_ms: int = 500) -> None:
        """Handle each partition's fetched messages as one list (in offset order) until stop().

        If the handler raises, the batch is retried one message at a time so that only the
        failing messages are dead-lettered (the handler must tolerate the repeat, as every
        at-least-once handler must)."""

        async def per_partition(
            tp: TopicPartition, msgs: list[Message[Any]], records: list[Any]
        ) -> None:
            try:
                await handler(msgs)
            except Exception:
                for msg in msgs:
                    try:
                        await handler([msg])
                    except Exception as e:
                        await self._handler_failed(msg, records, e)
                    self._processed[tp] = msg.offset + 1
            self._processed[tp] = records[-1].offset + 1

        await self._loop(per_partition, poll_timeout_ms)

    async def run_fetches(self, handler: BatchHandler, *, poll_timeout_ms: int = 500) -> None:
        """Like `run_batches`, but one call per fetch with the messages of every partition it
        returned (each partition's in offset order, one partition after another), so a handler
        whose cost is per call (acknowledgements it waits for) pays it once per fetch, not once
        per partition. If the handler raises, every message of the fetch is retried one at a
        time (run_batches' rule)."""
        if self._running is not None:
            raise RuntimeError("run() is already running on this consumer")
        self._running = asyncio.Event()
        try:
            c = self._c()
            processed = self._processed
            while not self._stopping:
                parts: list[tuple[TopicPartition, list[Message[Any]], list[Any]]] = []
                for tp, records in await self._fetch(poll_timeout_ms):
                    if self._stopping:
                        break
                    if self.group_id is not None and tp not in c.assignment():
                        continue  # revoked meanwhile: the new owner redoes it
                    if records:
                        parts.append((tp, await self._decode_partition(tp, records), records))
                msgs = [m for _, good, _ in parts for m in good]
                if msgs:
                    try:
                        await handler(msgs)
                    except Exception:
                        for tp, good, records in parts:
                            for msg in good:
                                try:
                                    await handler([msg])
                                except Exception as e:
                                    await self._handler_failed(msg, records, e)
                                processed[tp] = msg.offset + 1
                for tp, good, records in parts:
                    processed[tp] = records[-1].offset + 1  # dead letters included
                    if good:
                        CONSUMED.labels(tp.topic).inc(len(good))
                await self._commit(c)
            await self._commit(c)
        finally:
            self._running.set()
            self._running = None

    async def _handler_failed(self, msg: Message[Any], records: list[Any], e: Exception) -> None:
        if self._handler_errors == "raise":
            raise e
        rec = next(r for r in records if r.offset == msg.offset)
        log.error("handler failed on %s[%d]@%d", rec.topic, rec.partition, rec.offset, exc_info=e)
        await self._dead_letter(rec, "handler", f"{type(e).__name__}: {e}")

    async def _loop(
        self,
        per_partition: Callable[[TopicPartition, list[Message[Any]], list[Any]], Awaitable[None]],
        poll_timeout_ms: int,
    ) -> None:
        if self._running is not None:
            raise RuntimeError("run() is already running on this consumer")
        self._running = asyncio.Event()
        try:
            c = self._c()
            while not self._stopping:
                for tp, records in await self._fetch(poll_timeout_ms):
                    if self._stopping:
                        break
                    if self.group_id is not None and tp not in c.assignment():
                        continue  # revoked meanwhile: the new owner redoes it
                    good = await self._decode_partition(tp, records)
                    if good:
                        await per_partition(tp, good, records)
                        CONSUMED.labels(tp.topic).inc(len(good))
                    elif records:
                        self._processed[tp] = records[-1].offset + 1  # all dead-lettered
                await self._commit(c)
            await self._commit(c)
        finally:
            self._running.set()
            self._running = None


# --- tables -----------------------------------------------------------------------------------


async def read_table(
    bootstrap: str | None,
    topic: Topic[T],
    *,
    timeout_s: float = 30.0,
    start_timeout_s: float = 30.0,
    security: KafkaSecurity | None = None,
) -> dict[str, T]:
    """Read a compacted topic from the beginning to its current end: the latest value per key,
    with tombstones applied (deleted keys are absent). The same answer whether or not the broker
    has compacted yet. Undecodable records are skipped with a warning (the topic's group consumer
    dead-letters them)."""
    bootstrap = bootstrap or default_bootstrap()
    dec = _Decoder(topic)

    def make() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            **aiokafka_options(security),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )

    c = await _start(make, "table reader", bootstrap, start_timeout_s)
    try:
        parts = c.partitions_for_topic(topic.name)
        if not parts:
            await c._client._wait_on_metadata(topic.name)
            parts = c.partitions_for_topic(topic.name) or set()
        tps = [TopicPartition(topic.name, p) for p in sorted(parts)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        end = await c.end_offsets(tps)
        table: dict[str, T] = {}
        pending = {tp for tp in tps if end[tp] > 0}
        deadline = time.monotonic() + timeout_s
        while pending:
            for tp in list(pending):
                if await c.position(tp) >= end[tp]:
                    pending.discard(tp)
            if not pending:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic.name} to its end took more than {timeout_s}s")
            batches = await c.getmany(*pending, timeout_ms=500)
            for tp, records in batches.items():
                for rec in records:
                    if rec.offset >= end[tp]:
                        break
                    try:
                        msg = dec(rec)
                    except DeadLetter as dl:
                        log.warning(
                            "table %s: skipping %s[%d]@%d (%s: %s)",
                            topic.name,
                            rec.topic,
                            rec.partition,
                            rec.offset,
                            dl.reason,
                            dl.detail[:200],
                        )
                        continue
                    if msg.key is None:
                        continue
                    if msg.value is None:
                        table.pop(msg.key, None)
                    else:
                        table[msg.key] = msg.value
        return table
    finally:
        await c.stop()


# --- consumer lag -----------------------------------------------------------------------------


def record_consumer_lag(
    group: str,
    topics: Iterable[str],
    ends: Mapping[TopicPartition, int | None],
    done: Mapping[TopicPartition, int | None],
) -> dict[str, int]:
    """Set `governor_bus_consumer_lag{topic,group}` from each owned partition's end offset and
    the next offset to handle there; returns the lag by topic. Every topic of `topics` gets a
    value (0 when this process owns none of its partitions), so a sum over the instances of a
    group is the group's lag. Partitions whose end or position is not known yet count 0."""
    lag = dict.fromkeys(topics, 0)
    for tp, end in ends.items():
        pos = done.get(tp)
        if end is None or pos is None or tp.topic not in lag:
            continue
        lag[tp.topic] += max(0, end - pos)
    for topic, n in lag.items():
        CONSUMER_LAG.labels(topic, group).set(n)
    return lag


def consumer_lag(consumer: Consumer) -> dict[str, int]:
    """`record_consumer_lag` for a bus Consumer: end = the last stable offset of the latest fetch,
    position = the next offset not yet handled (else the fetch position). Call it periodically
    (the decider does on every tick); cheap, no request to the broker."""
    c = consumer._consumer
    if c is None:
        return {}
    assigned = c.assignment()
    ends = {tp: c.last_stable_offset(tp) for tp in assigned}
    done: dict[TopicPartition, int | None] = {}
    for tp in assigned:
        pos = consumer._processed.get(tp)
        if pos is None:
            try:  # the fetch position (private API; None while an offset reset is pending)
                pos = c._subscription.subscription.assignment.state_value(tp).position
            except Exception:  # pragma: no cover - aiokafka internals moved
                pos = None
        done[tp] = pos
    group = consumer.group_id or str(consumer._options["client_id"])
    return record_consumer_lag(group, [t.name for t in consumer.topics], ends, done)
