"""The typed bus: msgspec events over Kafka (aiokafka), one codec per topic, dead letters.

Producing::

    async with Producer(bootstrap) as producer:
        await producer.send(METRICS, sample)             # waits for the broker's ack
        fut = await producer.publish(METRICS, sample)    # queues; await fut for the ack
        futs = await producer.publish_many(LOAD, windows)  # one record batch per partition

Consuming (at-least-once: offsets are committed only after the handler returned)::

    consumer = Consumer(bootstrap, [DECISIONS], group_id="actuator")
    await consumer.start()
    await consumer.run(handle)            # or run_batches(handle_many), or poll() + commit()
    await run_core(core, consumer.fetches(), ...)   # governor.shell: one record per fetch
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
`start_timeout_s` in all; `governor.retry`) and then raises `BusUnavailable` naming the address.
`ready` is what a health endpoint reports. `stop()` flushes the producer and commits what was
processed.

Modules: `codec` (the wire format: Codec, Message, DeadLetter, Decoder), `connect` (where Kafka
is, starting a client), `producer`, `consumer`, `reading` (tables and histories read to their
end), `lag` (the consumer-lag gauge). Everything is importable from `governor.bus`.
"""

from governor.bus.codec import (
    CONTENT_TYPE,
    H_CONTENT_TYPE,
    H_DLQ_ERROR,
    H_DLQ_INDEX,
    H_DLQ_OFFSET,
    H_DLQ_PARTITION,
    H_DLQ_REASON,
    H_DLQ_TOPIC,
    H_SCHEMA_VERSION,
    Codec,
    DeadLetter,
    Decoder,
    DlqReason,
    Message,
    codec_for,
    dlq_headers,
)
from governor.bus.connect import (
    DEFAULT_BOOTSTRAP,
    BusUnavailable,
    Liveness,
    default_bootstrap,
    start_client,
    topic_partitions,
)
from governor.bus.consumer import (
    CONSUMED,
    DEAD_LETTERS,
    BatchHandler,
    Consumer,
    Fetch,
    Fetches,
    Handler,
    PartitionsHook,
)
from governor.bus.lag import CONSUMER_LAG, consumer_lag, record_consumer_lag
from governor.bus.producer import Producer
from governor.bus.reading import read_table, records_to_end

__all__ = [
    "CONSUMED",
    "CONSUMER_LAG",
    "CONTENT_TYPE",
    "DEAD_LETTERS",
    "DEFAULT_BOOTSTRAP",
    "H_CONTENT_TYPE",
    "H_DLQ_ERROR",
    "H_DLQ_INDEX",
    "H_DLQ_OFFSET",
    "H_DLQ_PARTITION",
    "H_DLQ_REASON",
    "H_DLQ_TOPIC",
    "H_SCHEMA_VERSION",
    "BatchHandler",
    "BusUnavailable",
    "Codec",
    "Consumer",
    "DeadLetter",
    "Decoder",
    "DlqReason",
    "Fetch",
    "Fetches",
    "Handler",
    "Liveness",
    "Message",
    "PartitionsHook",
    "Producer",
    "codec_for",
    "consumer_lag",
    "default_bootstrap",
    "dlq_headers",
    "read_table",
    "record_consumer_lag",
    "records_to_end",
    "start_client",
    "topic_partitions",
]
