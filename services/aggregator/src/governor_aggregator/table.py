"""The aggregator's faust table: its value (the windows of a workload's series) and its class."""

from __future__ import annotations

from typing import Any

import faust
import msgspec

from governor.metric_records import Partitions
from governor.pod_totals import PodTotals
from governor.windows import SeriesWindows


class MetricWindows(msgspec.Struct, array_like=True):
    """The windows of one (workload, metric) and the last source offset applied to them.

    `offset` makes reprocessing idempotent: after a rebalance or a crash the new owner restores
    this value from the changelog and skips every record at or below it (one workload lives in
    one partition, so its offsets only grow) — at-least-once delivery, exactly-once windows.
    """

    offset: int
    stable: SeriesWindows
    panic: SeriesWindows
    totals: PodTotals | None = None  # a per-pod series' instants (governor.pod_totals)


# The table value of one workload: its series by metric.
WorkloadWindows = dict[str, MetricWindows]


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
