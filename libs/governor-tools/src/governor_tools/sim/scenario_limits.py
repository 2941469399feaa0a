"""Namespace quotas and Volcano queues in a cluster scenario (`governor scenario`).

A scenario may list `quotas` (a namespace's ResourceQuota: `hard` in the quota's resource names,
what unmanaged pods hold of it) and `queues` (Volcano Queues: capability, deserved, guarantee,
weight, reclaimable, parent); a workload names its `namespace` and its `queue`. The simulated
cluster enforces them as a real one does, in every run: a replica the namespace's quota does not
admit fails creation (the ReplicaSet controller's `FailedCreate: exceeded quota`, retried), one
over its queue's capability stays pending (Volcano's scheduler does not bind it). The rebalance
run's decider reads them (the quotas and queues tables); the no-rebalance run (HPA-like) does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from governor.events import QueueState, QuotaState
from governor.quotas import quota_cost_of


class _Cfg(msgspec.Struct, rename="camel", forbid_unknown_fields=True, omit_defaults=True):
    pass


class QuotaSpec(_Cfg):
    name: str
    namespace: str
    hard: dict[str, float]
    unmanaged: dict[str, float] = msgspec.field(default_factory=dict)


class QueueSpec(_Cfg):
    name: str
    capability: dict[str, float] = msgspec.field(default_factory=dict)
    deserved: dict[str, float] = msgspec.field(default_factory=dict)
    guarantee: dict[str, float] = msgspec.field(default_factory=dict)
    weight: int = 1
    reclaimable: bool = True
    parent: str = ""


class Member(msgspec.Struct, frozen=True):
    """A scenario workload as quotas and queues see it."""

    workload: str
    namespace: str
    queue: str | None
    requests: dict[str, float]
    limits: dict[str, float]


def quota_states(quotas: Iterable[QuotaSpec], members: Iterable[Member]) -> list[QuotaState]:
    ms = list(members)
    return [
        QuotaState(
            quota=f"{q.namespace}/{q.name}",
            namespace=q.namespace,
            hard=dict(q.hard),
            unmanaged=dict(q.unmanaged),
            covers={
                m.workload: quota_cost_of(q.hard, m.requests, m.limits)
                for m in ms
                if m.namespace == q.namespace
            },
        )
        for q in quotas
    ]


def queue_states(queues: Iterable[QueueSpec], members: Iterable[Member]) -> list[QueueState]:
    ms = list(members)
    return [
        QueueState(
            queue=q.name,
            capability=dict(q.capability),
            deserved=dict(q.deserved),
            guarantee=dict(q.guarantee),
            weight=q.weight,
            reclaimable=q.reclaimable,
            parent=q.parent,
            covers={m.workload: dict(m.requests) for m in ms if m.queue == q.name},
        )
        for q in queues
    ]


def refused_by_quota(limit: str) -> bool:
    """Whether a grant's binding limit is a quota (admission refuses the pod: it fails creation)
    rather than a queue or the pool (the pod is created and stays pending)."""
    return limit.startswith("quota:")


def check_names(
    quotas: Iterable[QuotaSpec], queues: Iterable[QueueSpec], members: Mapping[str, Member]
) -> list[str]:
    """Problems with the scenario's quotas and queues, each naming its field."""
    known = {q.name for q in queues}
    out = [
        f"workloads[{w}].queue: unknown queue {m.queue!r}; queues: {sorted(known)}"
        for w, m in sorted(members.items())
        if m.queue is not None and m.queue not in known
    ]
    out += [
        f"queues[{q.name}].parent: unknown queue {q.parent!r}"
        for q in queues
        if q.parent and q.parent not in known
    ]
    seen: set[str] = set()
    for q in quotas:
        key = f"{q.namespace}/{q.name}"
        if key in seen:
            out.append(f"quotas: {key} is listed twice")
        seen.add(key)
    return out
