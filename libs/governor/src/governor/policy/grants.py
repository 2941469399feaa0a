"""The values of a pool's allocation (`policy.allocate`): a workload's Demand, its Grant with
the rule that bound it, the devices a replica holds, the whole Allocation."""

from __future__ import annotations

from typing import Any

import msgspec

from governor.events import Recommendation, Rule

DEFAULT_MARGIN = 0.10
TOL = 1e-9  # float slack in share and capacity comparisons


class Demand(msgspec.Struct, frozen=True, kw_only=True):
    """One workload's ask in a pool, as allocation sees it."""

    workload: str
    want: int
    floor: int = 0
    tier: int = 0
    weight: float = 1.0
    elastic: bool = False
    max_replicas: int | None = None
    requests: dict[str, float] = msgspec.field(default_factory=dict)
    joint_allocate: dict[str, Any] | None = None

    @classmethod
    def of(cls, rec: Recommendation) -> Demand:
        want = max(0, min(rec.desired, rec.max_replicas))
        return cls(
            workload=rec.workload,
            want=want,
            floor=min(max(rec.floor, rec.min_replicas, 0), want),
            tier=rec.priority,
            weight=rec.weight,
            elastic=rec.elastic,
            max_replicas=rec.max_replicas,
            requests=rec.requests,
            joint_allocate=rec.joint_allocate,
        )


class Grant(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    workload: str
    replicas: int
    wanted: int
    floor: int
    rule: Rule
    detail: str = ""
    # What ran out when replicas < wanted: resource -> the amount the missing replicas need.
    missing: dict[str, float] = msgspec.field(default_factory=dict)
    limit: str = ""  # the quota or queue that bound it ("quota:<ns>/<name>", "queue:<name>")

    @property
    def short(self) -> int:
        return self.wanted - self.replicas


class DevicePick(msgspec.Struct, frozen=True, array_like=True):
    """The devices one replica holds on its node."""

    workload: str
    gpus: tuple[int, ...]
    nics: tuple[int, ...]


class Allocation(msgspec.Struct, frozen=True, kw_only=True):
    """A pool's answer. Hand it back as `previous` next time: it round-trips through msgspec,
    so the decider can keep it in its state between evaluations."""

    grants: dict[str, Grant]
    placement: dict[str, dict[str, int]]  # node -> workload -> replicas
    devices: dict[str, list[DevicePick]]  # node -> replicas' devices, in placement order
    capacity: dict[str, float]  # the pool totals shares were measured against
    kept_previous: bool = False
    # The room each quota / queue capability left this pool: limit name -> resource -> amount.
    limits: dict[str, dict[str, float]] = msgspec.field(default_factory=dict)

    def replicas(self) -> dict[str, int]:
        return {w: g.replicas for w, g in self.grants.items()}
