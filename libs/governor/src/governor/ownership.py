"""Which workloads and pools one decider instance owns, from the partitions it was assigned.

Deciders scale out in one consumer group: an instance runs stage 1 for the workloads whose key
falls in a partition of `governor.load` it owns, and stage 2 for the pools whose key falls in a
partition of `governor.recommendations` it owns. A key's partition is the producer's: murmur2
of the key modulo the partition count, as Kafka's default partitioner (Java's and aiokafka's)
computes it, so ownership follows the records without a lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from aiokafka.partitioner import murmur2


@lru_cache(maxsize=1 << 16)
def partition_of(key: str, partitions: int) -> int:
    """The partition the default partitioner sends `key` to (memoized: a tick asks per workload)."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Ownership:
    """The partitions of the load and recommendations topics this instance holds.

    `Ownership.all()` is one instance that owns everything (the simulator, replays, tests that
    drive a core by hand); the default owns nothing (a member not yet assigned partitions)."""

    load_partitions: int = 0
    load: frozenset[int] = field(default_factory=frozenset)
    recommendation_partitions: int = 0
    recommendations: frozenset[int] = field(default_factory=frozenset)
    everything: bool = False

    @classmethod
    def all(cls) -> Ownership:
        return cls(everything=True)

    def owns_workload(self, workload: str) -> bool:
        """Stage 1: the workload's load windows arrive on a partition of ours."""
        if self.everything:
            return True
        return bool(self.load) and partition_of(workload, self.load_partitions) in self.load

    def owns_pool(self, pool: str) -> bool:
        """Stage 2: the pool's recommendations arrive on a partition of ours."""
        if self.everything:
            return True
        return (
            bool(self.recommendations)
            and partition_of(pool, self.recommendation_partitions) in self.recommendations
        )
