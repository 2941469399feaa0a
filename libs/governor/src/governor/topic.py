"""A topic of the contract (`governor.events`): its name, type, key and who may touch it.

The rows themselves, one per topic, are in `governor.events`; this module holds their shape and
the principals the ACLs are generated for (`governor.kafka_acls`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, get_args

import msgspec

T = TypeVar("T", bound=msgspec.Struct)


# Kafka principals: one per service, plus `admin` (creates topics and ACLs at deploy time, a
# super user), `viewer` (reads what `governor explain`/`ab` and subscribers read) and
# `metrics-producer` (apps and load generators writing samples directly), and
# `metrics-adapter` (governor-metrics-adapter, serving the load windows to HPAs).
Principal = Literal[
    "collector",
    "cluster-collector",
    "aggregator",
    "decider",
    "actuator",
    "admin",
    "viewer",
    "metrics-producer",
    "metrics-adapter",
]
PRINCIPALS: tuple[Principal, ...] = get_args(Principal)


@dataclass(frozen=True)
class Access:
    """Who may touch one topic (or, `prefixed`, every topic whose name starts with `name`).

    The ACLs are generated from these rows (`governor.kafka_acls`), so a topic cannot ship
    without its rights. `groups` are the consumer groups that read it with committed offsets;
    a reader without a group (a table reader) needs none. `creators` may create the topic
    themselves: only a service's own internal topics (faust's), never the contract's."""

    name: str
    writers: tuple[Principal, ...] = ()
    readers: tuple[Principal, ...] = ()
    groups: tuple[tuple[Principal, str], ...] = ()
    creators: tuple[Principal, ...] = ()
    prefixed: bool = False


@dataclass(frozen=True)
class Topic(Generic[T]):
    name: str
    type: type[T]
    key: Callable[[T], str]
    key_doc: str
    compacted: bool = False
    partitions: int = 6
    retention_ms: int | None = 7 * 24 * 3600 * 1000
    writers: tuple[Principal, ...] = ()
    readers: tuple[Principal, ...] = ()
    # (principal, consumer group id): the groups that consume this topic with committed offsets
    groups: tuple[tuple[Principal, str], ...] = ()
    wire_type: Any = None  # the wire's type if more than `type` (governor.metrics: MetricRecord)
    # A compacted topic rewritten all the time (the decider's checkpoints): roll the active
    # segment this often (`segment.ms`), since the broker only compacts closed segments. With
    # the default (7 days, or 1 GiB) the checkpoints of a 10,000-workload run never left the
    # active segment: 650k records that every assignment read in full.
    segment_ms: int | None = None

    @property
    def dlq(self) -> str:
        return f"{self.name}.dlq"

    @property
    def access(self) -> Access:
        return Access(self.name, self.writers, self.readers, self.groups)

    @property
    def dlq_access(self) -> Access:
        """Every service reading a topic dead-letters what it cannot decode (the viewer only
        reads); the viewer reads why."""
        writers = tuple(r for r in self.readers if r != "viewer")
        return Access(self.dlq, writers=writers, readers=("viewer",))
