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
    per_partition = {}
    for tp, end in ends.items():
        pos = done.get(tp)
        if end is not None and pos is not None:
            per_partition[tp] = max(0, end - pos)
    return record_lag(group, topics, per_partition)


def record_lag(
    group: str, topics: Iterable[str], lag: Mapping[TopicPartition, int]
) -> dict[str, int]:
    """`record_consumer_lag` from each owned partition's lag itself."""
    by_topic = dict.fromkeys(topics, 0)
    for tp, n in lag.items():
        if tp.topic in by_topic:
            by_topic[tp.topic] += n
    for topic, n in by_topic.items():
        CONSUMER_LAG.labels(topic, group).set(n)
    return by_topic


def consumer_lag(
    consumer: Consumer, lag: Mapping[TopicPartition, int] | None = None
) -> dict[str, int]:
    """`record_lag` for a bus Consumer (`Consumer.lag`: end = the last stable offset of the
    latest fetch, position = the next offset not yet handled; a partition none of whose records
    was handed out yet counts 0). Call it periodically (the decider does on every tick); cheap,
    no request to the broker. `lag`: `consumer.lag()` when the caller has it already."""
    if not consumer.started:
        return {}
    group = consumer.group_id or str(consumer._options["client_id"])
    topics = [t.name for t in consumer.topics]
    return record_lag(group, topics, consumer.lag() if lag is None else lag)
