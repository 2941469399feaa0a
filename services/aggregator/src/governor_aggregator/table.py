"""The aggregator's faust table class (its values: `governor.cores.state_buckets`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import faust

from governor import events
from governor.cores.aggregator import Emitted, StateWrite
from governor.cores.state_buckets import StateBuckets, bucket_partition
from governor.metric_records import Partitions

log = logging.getLogger("governor.aggregator")


class WorkloadTable(faust.Table):  # type: ignore[misc]
    """The aggregator's table (faust's documented `Table` setting): a key's changelog
    partition is the producers' partition of the workload (murmur2), remembered per key. The
    base class with `use_partitioner` leaves it to the producer, which hashes the key again on
    every write (one write per workload and batch: a few % of the whole worker). A bucket of
    workloads' values (`governor.cores.state_buckets`) names its partition in its key."""

    def partition_for_key(self, key: Any) -> int | None:
        bucket = bucket_partition(key)
        if bucket is not None:
            return bucket
        parts = getattr(self, "workload_partitions", None)
        if parts is None:
            parts = self.workload_partitions = Partitions(self.changelog_topic.partitions)
        return parts.of(key.decode())


class TableValues:
    """The table as the aggregator reads and writes it: one value per workload, held in
    records of many (`governor.cores.state_buckets`)."""

    def __init__(self, app: faust.App, buckets: StateBuckets) -> None:
        self.app = app
        self.table = app.Table(
            events.AGGREGATOR_TABLE,
            default=None,
            partitions=events.METRICS.partitions,
            key_type=bytes,
            value_type=bytes,
            use_partitioner=True,
        )
        self.buckets = buckets

    def stored(self, workload: str) -> bytes | None:
        value = self.buckets.stored(workload, self.table.get)
        while self.buckets.unreadable:
            key = self.buckets.unreadable.pop()
            log.warning("table record %r unreadable: its workloads start over", key)
        return value

    def workloads(self) -> list[str]:
        """Every workload with a value in the table (of the partitions assigned)."""
        return [
            w
            for key in list(self.table.keys())
            for w in self.buckets.workloads_in(key, self.table.get)
        ]

    def clear(self) -> None:
        """Partitions moved: the table (restored) is read again."""
        self.buckets.clear()

    async def write(self, writes: Sequence[Emitted]) -> None:
        """A checkpoint's new values (`StateWrite`s), in the records that hold them."""
        changed = [(w.key.decode(), w.value) for w in writes if isinstance(w, StateWrite)]
        for key, value in self.buckets.writes(changed, self.table.get):
            await self.store(key, value)

    async def store(self, key: bytes, value: bytes | None) -> None:
        """`table[key] = value`, or the key deleted (None); a write that finds the changelog
        gone from the producer's metadata goes out with `send_and_wait` first (see
        governor_aggregator.main's docstring)."""
        try:
            self.put(key, value)
        except TypeError:
            topic = self.table.changelog_topic.get_topic_name()
            part = self.table.partition_for_key(key)
            await self.app.producer.send_and_wait(topic, key, value, part, None, None)
            self.put(key, value)

    def put(self, key: bytes, value: bytes | None) -> None:
        if value is not None:
            self.table[key] = value
        elif key in self.table:
            del self.table[key]
