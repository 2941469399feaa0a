"""Consumer lag: `governor_bus_consumer_lag{topic,group}` from end offsets and positions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aiokafka import TopicPartition
from prometheus_client import Gauge

from governor.bus.consumer import Consumer

CONSUMER_LAG = Gauge(
    "governor_bus_consumer_lag",
    "Messages between the next one this process will handle and the partition's end (last "
    "stable offset), summed over the partitions it owns, by topic and consumer group (a "
    "group-less table reader: its client id).",
    ["topic", "group"],
)


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
    position = the next offset not yet handled (else the first offset handed out; a partition
    none of whose records was handed out yet counts 0). Call it periodically (the decider does
    on every tick); cheap, no request to the broker."""
    c = consumer._consumer
    if c is None:
        return {}
    assigned = c.assignment()
    ends = {tp: c.last_stable_offset(tp) for tp in assigned}
    done = {tp: consumer._processed.get(tp, consumer._first_fetched.get(tp)) for tp in assigned}
    group = consumer.group_id or str(consumer._options["client_id"])
    return record_consumer_lag(group, [t.name for t in consumer.topics], ends, done)
