"""The aggregator's faust table class (its value: `governor.cores.aggregator.WorkloadWindows`)."""

from __future__ import annotations

from typing import Any

import faust

from governor.metric_records import Partitions


class WorkloadTable(faust.Table):  # type: ignore[misc]
    """The aggregator's table (faust's documented `Table` setting): a key's changelog
    partition is the producers' partition of the workload (murmur2), remembered per key. The
    base class with `use_partitioner` leaves it to the producer, which hashes the key again on
    every write (one write per workload and batch: a few % of the whole worker)."""

    def partition_for_key(self, key: Any) -> int | None:
        parts = getattr(self, "workload_partitions", None)
        if parts is None:
            parts = self.workload_partitions = Partitions(self.changelog_topic.partitions)
        return parts.of(key.decode())
