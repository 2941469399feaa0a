"""KEDA's Kafka-lag arithmetic, as pure functions (the collector's `kafka_lag` source does the I/O).

Semantics follow KEDA's Kafka scaler (`pkg/scalers/kafka_scaler.go`, v2.x):

* lag of a partition = latest (end) offset - committed offset of the consumer group;
* no committed offset: `offsetResetPolicy: latest` counts 1 (the consumer will start at the end,
  but the group exists and should have a replica), `earliest` counts the whole partition (the
  latest offset) since the consumer will read it all;
* `excludePersistentLag`: a partition whose committed offset did not move since the previous
  poll counts 0 for scaling (a stuck consumer: more replicas will not help) but still counts
  for activation; the previous offsets are the state the caller keeps between polls;
* total lag = sum over partitions; unless `allowIdleConsumers`, it is capped so the desired
  count (ceil(total / lagThreshold)) cannot exceed the partition count — or the number of
  partitions that have lag, with `limitToPartitionsWithLag` (when at least one has lag);
* active = the total lag *including* persistent lag > `activationLagThreshold` (strictly).

Two deliberate differences from KEDA, both in what KEDA leaves to chance:

* KEDA compares `totalLag / lagThreshold > upperBound` in integer division, so a lag up to
  `lagThreshold - 1` above the cap slips through (and asks for one replica more than there
  are partitions); here the cap is exact: `min(total, upperBound × lagThreshold)`.
* A committed offset above the end offset (offsets read at slightly different moments, or a
  truncated topic) counts 0, never a negative lag.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import msgspec

OffsetResetPolicy = Literal["latest", "earliest"]


class PartitionOffsets(msgspec.Struct, frozen=True):
    """One partition as polled: its end offset and the group's committed offset (None: none)."""

    partition: int
    latest: int
    committed: int | None


class LagSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The scaler's knobs (the `KafkaLagSource` spec fields of the same names)."""

    lag_threshold: int = 10
    activation_lag_threshold: int = 0
    offset_reset_policy: OffsetResetPolicy = "latest"
    allow_idle_consumers: bool = False
    exclude_persistent_lag: bool = False
    limit_to_partitions_with_lag: bool = False

    def __post_init__(self) -> None:
        if self.lag_threshold <= 0:
            raise ValueError(f"lag_threshold: must be > 0, got {self.lag_threshold}")
        if self.activation_lag_threshold < 0:
            raise ValueError(
                f"activation_lag_threshold: must be >= 0, got {self.activation_lag_threshold}"
            )
        if self.allow_idle_consumers and self.limit_to_partitions_with_lag:
            # KEDA rejects this combination too: the two ask for opposite bounds.
            raise ValueError(
                "allow_idle_consumers and limit_to_partitions_with_lag cannot both be set"
            )


class PartitionLag(msgspec.Struct, frozen=True):
    """One partition's lag: `lag` counts for scaling, `lag_with_persistent` for activation."""

    partition: int
    lag: int
    lag_with_persistent: int


class LagReport(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one poll.

    total_lag: what drives scaling (persistent lag excluded if asked, capped unless idle
    consumers are allowed); total_lag_with_persistent: uncapped, what activation looks at;
    upper_bound: the replica bound the cap used (None when uncapped).
    """

    total_lag: int
    total_lag_with_persistent: int
    partitions: int
    partitions_with_lag: int
    active: bool
    upper_bound: int | None
    per_partition: tuple[PartitionLag, ...]

    def desired_replicas(self, lag_threshold: int) -> int:
        """KEDA's (via HPA AverageValue) desired count: ceil(total lag / threshold)."""
        return math.ceil(self.total_lag / lag_threshold)


def partition_lag(
    latest: int, committed: int | None, offset_reset_policy: OffsetResetPolicy
) -> int:
    """Lag of one partition before persistent-lag exclusion (KEDA's getLagForPartition)."""
    if committed is None or committed < 0:
        return 1 if offset_reset_policy == "latest" else max(latest, 0)
    return max(latest - committed, 0)


def step_previous(
    previous: Mapping[int, int], offsets: list[PartitionOffsets] | tuple[PartitionOffsets, ...]
) -> dict[int, int]:
    """The previous-offsets state after a poll: each partition's committed offset, where there
    is one (a partition without a commit keeps what it had)."""
    out = dict(previous)
    for p in offsets:
        if p.committed is not None and p.committed >= 0:
            out[p.partition] = p.committed
    return out


def compute_lag(
    offsets: list[PartitionOffsets] | tuple[PartitionOffsets, ...],
    settings: LagSettings,
    previous: Mapping[int, int] | None = None,
) -> tuple[LagReport, dict[int, int]]:
    """One poll of KEDA's Kafka scaler: the lag report and the next previous-offsets state.

    `previous` maps partition -> committed offset seen at the previous poll (only used, and only
    meaningful, with `exclude_persistent_lag`); pass the returned state to the next call.
    """
    prev = previous or {}
    per: list[PartitionLag] = []
    for p in sorted(offsets, key=lambda o: o.partition):
        raw = partition_lag(p.latest, p.committed, settings.offset_reset_policy)
        lag = raw
        has_commit = p.committed is not None and p.committed >= 0
        if settings.exclude_persistent_lag and has_commit and prev.get(p.partition) == p.committed:
            # The consumer did not move since the last poll: more replicas will not help.
            lag = 0
        per.append(PartitionLag(p.partition, lag, raw))

    total = sum(p.lag for p in per)
    total_with_persistent = sum(p.lag_with_persistent for p in per)
    partitions = len(per)
    with_lag = sum(1 for p in per if p.lag > 0)

    upper: int | None = None
    if not settings.allow_idle_consumers or settings.limit_to_partitions_with_lag:
        upper = partitions
        if settings.limit_to_partitions_with_lag and with_lag > 0:
            upper = with_lag
        total = min(total, upper * settings.lag_threshold)

    report = LagReport(
        total_lag=total,
        total_lag_with_persistent=total_with_persistent,
        partitions=partitions,
        partitions_with_lag=with_lag,
        active=total_with_persistent > settings.activation_lag_threshold,
        upper_bound=upper,
        per_partition=tuple(per),
    )
    next_prev = step_previous(prev, offsets) if settings.exclude_persistent_lag else {}
    return report, next_prev
