"""Capacity-aware allocation of one pool: who gets how many replicas when the nodes are full.

Inventory. A node offers its allocatable minus what unmanaged pods request; not-ready and
unschedulable nodes offer nothing. Managed workloads' running replicas are not subtracted: the
allocation re-places every managed replica from scratch, so `requested_managed` is ignored and
each Device's `free` must likewise be net of unmanaged pods only (the collector's contract).
Device resources (`devices.DEVICE_RESOURCES`) are satisfied by Device objects only; every other
requested resource must fit the node's scalar free amount. A replica lives on one node, so
capacity is per node: every granted replica is placed on a concrete node and the answer is real.

Demand. want = min(desired, max_replicas); floor = min(max(floor, min_replicas), want) — the
floor guarantees what the workload asks for, it never inflates it (scale to zero stays zero).

Order. Workloads fall into classes: tier (Recommendation.priority, higher first, as a
PriorityClass value) and, inside a tier, services before elastic training — elastic replicas
above the floor are the first to go when a tier shrinks (Volcano preempts above-minAvailable
pods first, and an elastic job tolerates it by design). Then:

1. floors: when they all fit (packed first-fit-decreasing, every class at once) they are all
   placed; when they do not, class by class from the top, so the lowest class loses them first
   (elastic before services inside a tier), and inside a class weighted DRF decides (the largest
   weighted share loses first);
2. above the floor, class by class from the top: a class only gets what the classes above it
   left, so a higher tier never loses above-floor replicas to a lower tier's above-floor demand.

Inside a class: weighted DRF by progressive filling — one replica at a time to the workload with
the lowest weighted dominant share (dominant share = max over cpu, memory, … , GPUs and NIC VFs
of allocated / pool capacity; divided by weight) that still wants more and whose next replica
fits on some node; ties go to the smaller workload id. On small pools this equals an exhaustive
search for the best allocation in that order (tests/unit/test_allocate_bruteforce.py says what
"best" means and where first-fit packing may fall short of it). Placement is first-fit over
nodes by name (device-less nodes first for replicas that need no devices, so they do not strand
GPUs); a workload whose replica fits nowhere is done: capacity only shrinks as the fill goes on.

Hysteresis. With the previous allocation given, it is kept as a whole when (a) the same
workloads are present, (b) each want is within `margin` (default 10 %) of the previous want —
of the previous grant when only a replicas map is given —, (c) each previous grant is at most
max_replicas and at least the new floor, unless that floor did not rise (a floor the pool could
not meet before may stay unmet), (d) the previous grants still fit the nodes (the previous
placement as it was, else a first-fit-decreasing packing) and every quota and queue capability,
and (e) no resource's pool capacity grew since, and no quota or queue was lifted or grew (only
known from a previous `Allocation`: new room is handed out at once).

Quotas and queues (`constraints`, built by `policy.quotas.constraints`). A replica must also fit
every namespace ResourceQuota and Volcano queue capability that covers its workload (hard, like
a node: a full one stops the workload), and may not take what another queue's guarantee keeps
for that queue's own demand. Replicas a non-reclaimable queue held in the previous allocation
count as floors; above the floors, inside a class, queues below their deserved share fill first.
The whole order, as one table: docs/scalingpolicy.md. With no constraints, nothing changes.
A grant a quota or queue stopped has rule `capacity`, `limit` naming it, and a detail such as
`quota: shop/compute-quota requests.cpu 38/40 -> 6`.

Each grant names the rule that bound it: `unchanged` (got what it wanted), `hysteresis` (the
previous grant was kept), `device_fit` (no node can place the devices of one more replica), else
the first that holds of `priority` (a higher class holds replicas of the phase the workload was
stopped in), `fair_share` (its own class's peers do), `floor` (stopped above its floor while other
workloads' floors hold room), `capacity`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from governor.events import NodeState, Recommendation, Rule, Shortfall
from governor.policy import devices as dev
from governor.policy.quotas import Constraints, Ledger

DEFAULT_MARGIN = 0.10
_TOL = 1e-9
GPU_DIM = dev.GPU  # DRF dimension of whole GPUs (gpu-core shares count as fractions)
RDMA_DIM = dev.RDMA  # DRF dimension of NIC VFs


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


# --- the working state (private, mutable, discarded when the call returns) --------------------


class _Work:
    __slots__ = (
        "blocked",
        "cls",
        "d",
        "dreq",
        "floor",
        "key",
        "n",
        "req",
        "size",
        "unit",
        "want",
    )

    def __init__(
        self, d: Demand, req: tuple[tuple[int, float], ...], dreq: dev.DeviceRequest
    ) -> None:
        self.d = d
        self.want = max(0, d.want)
        self.floor = min(max(0, d.floor), self.want)
        self.cls = (-d.tier, d.elastic)
        self.req = req
        self.dreq = dreq
        self.key = (req, dreq)
        self.n = 0
        self.unit = 0.0  # weighted dominant share of one replica
        self.size = 0.0  # dominant share of one replica (first-fit-decreasing order)
        self.blocked = ""  # the phase it was stopped in: "floor" | "above" | ""


class _Pool:
    def __init__(self, nodes: Iterable[NodeState], resources: list[str]) -> None:
        usable = sorted((n for n in nodes if n.ready and n.schedulable), key=lambda n: n.node)
        self.names = [n.node for n in usable]
        self.free = [
            [
                max(0.0, n.allocatable.get(r, 0.0) - n.requested_unmanaged.get(r, 0.0))
                for r in resources
            ]
            for n in usable
        ]
        topo = [dev.topology(n.devices) for n in usable]
        self.shape = [s for s, _ in topo]
        self.layout = [lay for _, lay in topo]
        with_devices = [i for i, s in enumerate(self.shape) if any(g[1] or g[2] for g in s)]
        has = set(with_devices)
        self.plain_order = [i for i in range(len(usable)) if i not in has] + with_devices
        self.device_order = with_devices
        cap = {r: sum(f[i] for f in self.free) for i, r in enumerate(resources)}
        cap[GPU_DIM] = sum(f for s in self.shape for g in s for f in g[1]) / dev.WHOLE
        cap[RDMA_DIM] = float(sum(v for s in self.shape for g in s for v in g[2]))
        self.capacity = cap
        self._free0 = [list(f) for f in self.free]
        self._shape0 = list(self.shape)
        self.reset()

    def reset(self) -> None:
        """Back to the empty inventory (nothing managed placed)."""
        self.free = [list(f) for f in self._free0]
        self.shape = list(self._shape0)
        self.placed: list[dict[str, int]] = [{} for _ in self.names]
        self.picks: list[list[DevicePick]] = [[] for _ in self.names]
        self.ptr: dict[object, int] = {}

    def place_on(self, i: int, w: _Work) -> bool:
        free = self.free[i]
        for r, a in w.req:
            if free[r] < a - _TOL * max(1.0, a):
                return False
        placed = dev.place(self.shape[i], w.dreq)
        if placed is None:
            return False
        for r, a in w.req:
            free[r] -= a
        if not w.dreq.empty:
            self.shape[i] = placed.shape
            gpus, nics = dev.minors(self.layout[i], placed)
            self.picks[i].append(DevicePick(w.d.workload, gpus, nics))
        self.placed[i][w.d.workload] = self.placed[i].get(w.d.workload, 0) + 1
        return True

    def place(self, w: _Work) -> bool:
        """First fit; a node that cannot take this shape now never will in this pass."""
        order = self.plain_order if w.dreq.empty else self.device_order
        p = self.ptr.get(w.key, 0)
        while p < len(order):
            if self.place_on(order[p], w):
                self.ptr[w.key] = p
                return True
            p += 1
        self.ptr[w.key] = p
        return False


def _fill(
    pool: _Pool,
    ws: list[_Work],
    target: str,
    phase: str,
    ledger: Ledger | None = None,
    *,
    deserved: bool = False,
    floors: Mapping[str, int] | None = None,
) -> list[_Work]:
    """Weighted DRF progressive filling of `ws` up to each one's floor or want.

    With a ledger, a replica must also pass the quotas and queues: a full limit stops the
    workload for good; another queue's guarantee defers it (returned, to try again once that
    queue holds its share); with `deserved`, a queue at its deserved share waits this pass."""
    if target != "floor":
        goal = {id(w): w.want for w in ws}
    elif floors:
        goal = {id(w): max(w.floor, floors.get(w.d.workload, 0)) for w in ws}
    else:
        goal = {id(w): w.floor for w in ws}
    heap = [(w.n * w.unit, w.d.workload, k) for k, w in enumerate(ws) if w.n < goal[id(w)]]
    heapq.heapify(heap)
    deferred: list[_Work] = []
    while heap:
        _, name, k = heapq.heappop(heap)
        w = ws[k]
        if w.blocked:
            continue
        why = ledger.refuses(name, deserved=deserved) if ledger is not None else None
        if why is not None:
            if why[0] == "hard":
                w.blocked = phase
            elif why[0] == "reserve":
                deferred.append(w)
            continue
        if pool.place(w):
            if ledger is not None:
                ledger.take(name)
            w.n += 1
            if w.n < goal[id(w)]:
                heapq.heappush(heap, (w.n * w.unit, name, k))
        else:
            w.blocked = phase
    return deferred


def _fill_limited(
    pool: _Pool,
    ws: list[_Work],
    target: str,
    phase: str,
    ledger: Ledger,
    floors: Mapping[str, int],
) -> None:
    """`_fill` under quotas and queues: queues below their deserved share first (above the
    floor), then everyone, again while a deferred workload may now pass a guarantee."""
    if target == "want" and ledger.has_deserved():
        _fill(pool, ws, target, phase, ledger, deserved=True)
    while True:
        before = sum(w.n for w in ws)
        deferred = _fill(pool, ws, target, phase, ledger, floors=floors)
        if not deferred or sum(w.n for w in ws) == before:
            break
    for w in deferred:
        w.blocked = w.blocked or phase


def _shares(ws: list[_Work], pool: _Pool, resources: list[str]) -> None:
    cap = pool.capacity
    for w in ws:
        asks = [(resources[r], a) for r, a in w.req]
        asks += [(GPU_DIM, w.dreq.gpu_units), (RDMA_DIM, float(w.dreq.nics))]
        # A resource the pool lacks counts as all of it: the replica cannot be placed anyway.
        w.size = max((a / cap[r] if cap[r] > 0 else 1.0 for r, a in asks if a > 0), default=0.0)
        w.unit = w.size / max(w.d.weight, _TOL)


def _prepare(
    demands: Iterable[Demand | Recommendation], nodes: Iterable[NodeState]
) -> tuple[list[_Work], _Pool, list[str]]:
    ds = [d if isinstance(d, Demand) else Demand.of(d) for d in demands]
    ds.sort(key=lambda d: d.workload)
    resources = sorted(
        {r for d in ds for r, a in d.requests.items() if a > 0 and r not in dev.DEVICE_RESOURCES}
    )
    index = {r: i for i, r in enumerate(resources)}
    pool = _Pool(nodes, resources)
    ws = [
        _Work(
            d,
            tuple(sorted((index[r], a) for r, a in d.requests.items() if a > 0 and r in index)),
            dev.device_request(d.requests, d.joint_allocate),
        )
        for d in ds
    ]
    _shares(ws, pool, resources)
    return ws, pool, resources


def allocate(
    demands: Iterable[Demand | Recommendation],
    nodes: Iterable[NodeState],
    previous: Allocation | Mapping[str, int] | None = None,
    *,
    margin: float = DEFAULT_MARGIN,
    constraints: Constraints | None = None,
) -> Allocation:
    """Replicas per workload of one pool, each with the rule that bound it (pure).

    `constraints`: the namespace quotas and Volcano queues over the pool (`policy.quotas`)."""
    ws, pool, resources = _prepare(demands, nodes)
    ledger = _ledger(ws, pool, constraints)
    if previous is not None:
        kept = _keep(ws, pool, previous, margin, ledger)
        if kept is not None:
            return kept
        pool.reset()
        if ledger is not None:
            ledger.reset()
    if ledger is not None:
        return _allocate_limited(ws, pool, resources, ledger, previous)
    classes = sorted({w.cls for w in ws})
    members = {c: [w for w in ws if w.cls == c] for c in classes}
    if _pack(pool, ws, {w.d.workload: w.floor for w in ws}):
        for w in ws:
            w.n = w.floor
    else:
        pool.reset()
        for c in classes:
            _fill(pool, members[c], "floor", "floor")
    for c in classes:
        _fill(pool, members[c], "want", "above")
    census = _Census(ws, pool)
    grants = {w.d.workload: _grant(w, census, resources) for w in ws}
    return _result(grants, pool, kept=False)


def _ledger(ws: list[_Work], pool: _Pool, constraints: Constraints | None) -> Ledger | None:
    if constraints is None or constraints.empty:
        return None
    return Ledger(
        constraints,
        {w.d.workload: w.want for w in ws},
        {w.d.workload: w.d.requests for w in ws},
        pool.capacity,
    )


def _allocate_limited(
    ws: list[_Work],
    pool: _Pool,
    resources: list[str],
    ledger: Ledger,
    previous: Allocation | Mapping[str, int] | None,
) -> Allocation:
    """The same order as without limits, each replica also passing the ledger; what a
    non-reclaimable queue held before counts as a floor."""
    before = previous.replicas() if isinstance(previous, Allocation) else dict(previous or {})
    held = ledger.protected(before, {w.d.workload: w.want for w in ws})
    floors = {w.d.workload: max(w.floor, held.get(w.d.workload, 0)) for w in ws}
    classes = sorted({w.cls for w in ws})
    members = {c: [w for w in ws if w.cls == c] for c in classes}
    if _pack(pool, ws, floors, ledger):
        for w in ws:
            w.n = floors[w.d.workload]
    else:
        pool.reset()
        ledger.reset()
        for c in classes:
            _fill_limited(pool, members[c], "floor", "floor", ledger, floors)
    for c in classes:
        _fill_limited(pool, members[c], "want", "above", ledger, floors)
    census = _Census(ws, pool)
    grants = {w.d.workload: _limited_grant(w, census, resources, ledger) for w in ws}
    return _result(grants, pool, kept=False, ledger=ledger)


def _limited_grant(w: _Work, census: _Census, resources: list[str], ledger: Ledger) -> Grant:
    """The grant, naming the quota or queue that stopped it when one did."""
    g = _grant(w, census, resources)
    if g.short <= 0:
        return g
    bound = ledger.binding(w.d.workload)
    if bound is None:
        return g
    name, text = bound
    missing = {
        r: g.short * a
        for lim in ledger.limits
        if lim.name == name
        for r, a in lim.cost.get(w.d.workload, {}).items()
    }
    return msgspec.structs.replace(
        g,
        rule="capacity",
        detail=f"{text} -> {w.n}; {w.n}/{w.want} replicas (floor {w.floor}, tier {w.d.tier})",
        missing=missing or g.missing,
        limit=name,
    )


def _result(
    grants: dict[str, Grant], pool: _Pool, *, kept: bool, ledger: Ledger | None = None
) -> Allocation:
    return Allocation(
        grants=grants,
        placement={pool.names[i]: p for i, p in enumerate(pool.placed) if p},
        devices={pool.names[i]: p for i, p in enumerate(pool.picks) if p},
        capacity=dict(pool.capacity),
        kept_previous=kept,
        limits=ledger.room() if ledger is not None else {},
    )


class _Census:
    """What every class holds once filling is over, to say who a short workload lost to."""

    def __init__(self, ws: list[_Work], pool: _Pool) -> None:
        self.classes = sorted({w.cls for w in ws})
        self.held = dict.fromkeys(self.classes, 0)
        self.above = dict.fromkeys(self.classes, 0)
        self.floors = 0
        for w in ws:
            self.held[w.cls] += w.n
            self.above[w.cls] += max(0, w.n - w.floor)
            self.floors += min(w.n, w.floor)
        nres = len(pool.free[0]) if pool.free else 0
        self.max_free = [max((f[r] for f in pool.free), default=0.0) for r in range(nres)]
        self.sum_free = [sum(f[r] for f in pool.free) for r in range(nres)]
        self.shapes = sorted({pool.shape[i] for i in pool.device_order})
        self.device_blocked: dict[dev.DeviceRequest, bool] = {}

    def exhausted(self, w: _Work, resources: list[str]) -> tuple[list[str], bool, bool]:
        """(resources that ran out, devices fit nowhere, fragmented: each fits somewhere alone)."""
        out = [resources[r] for r, a in w.req if self.max_free[r] < a - _TOL * max(1.0, a)]
        blocked = False
        if not w.dreq.empty:
            if w.dreq not in self.device_blocked:
                self.device_blocked[w.dreq] = all(dev.place(s, w.dreq) is None for s in self.shapes)
            blocked = self.device_blocked[w.dreq]
            if blocked:
                out += sorted(
                    r for r, a in w.d.requests.items() if a > 0 and r in dev.DEVICE_RESOURCES
                )
        if out:
            return out, blocked, False
        return sorted(r for r, a in w.d.requests.items() if a > 0), False, True

    def rivals(self, w: _Work, phase: str) -> tuple[int, int, int]:
        """Replicas held by higher classes, by peers, by others' floors, in the phase w lost."""
        held = self.held if phase == "floor" else self.above
        own = w.n if phase == "floor" else max(0, w.n - w.floor)
        higher = sum(held[c] for c in self.classes if c < w.cls)
        floors = 0 if phase == "floor" else self.floors - min(w.n, w.floor)
        return higher, held[w.cls] - own, floors


def _grant(w: _Work, census: _Census, resources: list[str]) -> Grant:
    d = w.d
    if w.n >= w.want:
        return Grant(
            workload=d.workload, replicas=w.n, wanted=w.want, floor=w.floor, rule="unchanged"
        )
    ran_out, device_blocked, fragmented = census.exhausted(w, resources)
    short = w.want - w.n
    missing = {r: short * d.requests.get(r, 0.0) for r in ran_out}
    phase = w.blocked or "above"
    higher, peers, floors = census.rivals(w, phase)
    kind = "" if phase == "floor" else "above-floor "
    rule: Rule
    if device_blocked:
        rule, lost = "device_fit", ""
    elif higher:
        rule, lost = "priority", f"; higher classes hold {higher} {kind}replicas"
    elif peers:
        rule, lost = "fair_share", f"; its class's peers hold {peers} {kind}replicas"
    elif floors:
        rule, lost = "floor", f"; other workloads' floors hold {floors} replicas"
    else:
        rule, lost = "capacity", ""
    where = "even its floor" if phase == "floor" else "above its floor"
    if fragmented:
        why = "no single node has room for all of one more replica's requests"
    else:
        why = "out of " + ", ".join(ran_out)
        scattered = [
            f"{resources[r]} ({census.sum_free[r]:g} free in the pool, no node has {a:g})"
            for r, a in w.req
            if resources[r] in ran_out and census.sum_free[r] >= a
        ]
        if scattered:
            why += "; scattered: " + ", ".join(scattered)
    detail = f"{w.n}/{w.want} replicas (floor {w.floor}, tier {d.tier}): short {where}; {why}{lost}"
    return Grant(
        workload=d.workload,
        replicas=w.n,
        wanted=w.want,
        floor=w.floor,
        rule=rule,
        detail=detail,
        missing=missing,
    )


# --- hysteresis -------------------------------------------------------------------------------


def _within(new: int, ref: int, margin: float) -> bool:
    return abs(new - ref) <= margin * ref + _TOL


def _keep(
    ws: list[_Work],
    pool: _Pool,
    previous: Allocation | Mapping[str, int],
    margin: float,
    ledger: Ledger | None = None,
) -> Allocation | None:
    """The previous allocation, re-placed on today's nodes, if nothing moved past the margin."""
    if isinstance(previous, Allocation):
        grants = previous.replicas()
        ref = {w: g.wanted for w, g in previous.grants.items()}
        # A floor the previous allocation could not meet may stay unmet, unless it rose.
        floors = {w: g.floor for w, g in previous.grants.items()}
    else:
        grants = dict(previous)
        ref = grants
        floors = {}
    if set(grants) != {w.d.workload for w in ws}:
        return None
    for w in ws:
        name = w.d.workload
        g = grants[name]
        ceiling = w.d.max_replicas if w.d.max_replicas is not None else g
        floor = w.floor if w.floor > floors.get(name, w.floor) else min(w.floor, g)
        if not (_within(w.want, ref[name], margin) and floor <= g <= ceiling):
            return None
    by_name = {w.d.workload: w for w in ws}
    if not _packed(ws, pool, grants, previous):
        return None
    if ledger is not None and not ledger.fits(grants):
        return None
    if isinstance(previous, Allocation) and _limits_loosened(previous.limits, ledger):
        return None
    if isinstance(previous, Allocation):
        for r, c in pool.capacity.items():
            if c > previous.capacity.get(r, 0.0) + _TOL * max(1.0, c):
                return None
    out: dict[str, Grant] = {}
    for name, g in grants.items():
        w = by_name[name]
        before = previous.grants[name] if isinstance(previous, Allocation) else None
        rule: Rule = "unchanged" if g == w.want else "hysteresis"
        out[name] = Grant(
            workload=name,
            replicas=g,
            wanted=w.want,
            floor=w.floor,
            rule=rule,
            detail=f"kept {g} (wants {w.want}, within {margin:.0%} of {ref[name]})"
            if rule == "hysteresis"
            else "",
            missing=dict(before.missing) if before is not None and g < w.want else {},
            limit=before.limit if before is not None and g < w.want else "",
        )
    return _result(out, pool, kept=True, ledger=ledger)


def _limits_loosened(before: Mapping[str, Mapping[str, float]], ledger: Ledger | None) -> bool:
    """A quota or queue capability was lifted or gives more room than before: like new nodes,
    new room is handed out at once."""
    now = ledger.room() if ledger is not None else {}
    for name, room in before.items():
        if name not in now:
            return True
        for r, v in room.items():
            if now[name].get(r, float("inf")) > v + _TOL * max(1.0, abs(v)):
                return True
    return False


def _pack(
    pool: _Pool, ws: list[_Work], counts: Mapping[str, int], ledger: Ledger | None = None
) -> bool:
    """First-fit-decreasing of `counts` replicas onto the pool (dominant share decreasing)."""
    for w in sorted(ws, key=lambda w: (-w.size, w.d.workload)):
        for _ in range(counts.get(w.d.workload, 0)):
            if ledger is not None and ledger.refuses(w.d.workload) is not None:
                return False
            if not pool.place(w):
                return False
            if ledger is not None:
                ledger.take(w.d.workload)
    return True


def _packed(
    ws: list[_Work],
    pool: _Pool,
    grants: Mapping[str, int],
    previous: Allocation | Mapping[str, int],
) -> bool:
    """Places `grants` on the empty pool: the previous placement if it still fits, else FFD."""
    by_name = {w.d.workload: w for w in ws}
    if isinstance(previous, Allocation):
        index = {name: i for i, name in enumerate(pool.names)}
        ok = set(previous.placement) <= set(index)
        for node, on in sorted(previous.placement.items()) if ok else ():
            # Device replicas replay in their original order so the same choices recur.
            remaining = dict(on)
            order: list[str] = []
            for pick in previous.devices.get(node, []):
                if remaining.get(pick.workload, 0) > 0:
                    order.append(pick.workload)
                    remaining[pick.workload] -= 1
            order += [n for n, k in sorted(remaining.items()) for _ in range(k)]
            i = index[node]
            if any(n not in by_name or not pool.place_on(i, by_name[n]) for n in order):
                ok = False
                break
        placed: dict[str, int] = {}
        for on_node in pool.placed:
            for n, k in on_node.items():
                placed[n] = placed.get(n, 0) + k
        if ok and all(placed.get(n, 0) == k for n, k in grants.items()):
            return True
        pool.reset()
    return _pack(pool, ws, grants)


def shortfalls(alloc: Allocation, pool: str, at: float) -> list[Shortfall]:
    """One Shortfall per workload granted less than it wanted (topic governor.shortfalls)."""
    return [
        Shortfall(
            workload=g.workload,
            pool=pool,
            wanted=g.wanted,
            granted=g.replicas,
            resources=dict(g.missing),
            reason=f"{g.rule}: {g.detail}" if g.detail else g.rule,
            at=at,
            limit=g.limit,
        )
        for g in sorted(alloc.grants.values(), key=lambda g: g.workload)
        if g.short > 0
    ]
