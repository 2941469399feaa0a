"""The allocation's working state and its progressive fill (`policy.allocate` orders the calls).

`Work` is one workload's mutable state during one `allocate` call, `Pool` the pool's nodes with
what is placed on them so far (first-fit per node, devices picked per replica); `fill` gives
replicas one at a time by weighted DRF; `Census` and `grant` name the rule that bound each
workload once the fill is done. Private to the call: created, mutated and discarded in it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

from governor.events import NodeState, Recommendation, Rule
from governor.policy import devices as dev
from governor.policy.grants import TOL, Demand, DevicePick, Grant
from governor.policy.quotas import Ledger

GPU_DIM = dev.GPU  # DRF dimension of whole GPUs (gpu-core shares count as fractions)
RDMA_DIM = dev.RDMA  # DRF dimension of NIC VFs


class Work:
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


class Pool:
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

    def place_on(self, i: int, w: Work) -> bool:
        free = self.free[i]
        for r, a in w.req:
            if free[r] < a - TOL * max(1.0, a):
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

    def place(self, w: Work) -> bool:
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


def fill(
    pool: Pool,
    ws: list[Work],
    target: str,
    phase: str,
    ledger: Ledger | None = None,
    *,
    deserved: bool = False,
    floors: Mapping[str, int] | None = None,
) -> list[Work]:
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
    deferred: list[Work] = []
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


def fill_limited(
    pool: Pool,
    ws: list[Work],
    target: str,
    phase: str,
    ledger: Ledger,
    floors: Mapping[str, int],
) -> None:
    """`fill` under quotas and queues: queues below their deserved share first (above the
    floor), then everyone, again while a deferred workload may now pass a guarantee."""
    if target == "want" and ledger.has_deserved():
        fill(pool, ws, target, phase, ledger, deserved=True)
    while True:
        before = sum(w.n for w in ws)
        deferred = fill(pool, ws, target, phase, ledger, floors=floors)
        if not deferred or sum(w.n for w in ws) == before:
            break
    for w in deferred:
        w.blocked = w.blocked or phase


def _shares(ws: list[Work], pool: Pool, resources: list[str]) -> None:
    cap = pool.capacity
    for w in ws:
        asks = [(resources[r], a) for r, a in w.req]
        asks += [(GPU_DIM, w.dreq.gpu_units), (RDMA_DIM, float(w.dreq.nics))]
        # A resource the pool lacks counts as all of it: the replica cannot be placed anyway.
        w.size = max((a / cap[r] if cap[r] > 0 else 1.0 for r, a in asks if a > 0), default=0.0)
        w.unit = w.size / max(w.d.weight, TOL)


def prepare(
    demands: Iterable[Demand | Recommendation], nodes: Iterable[NodeState]
) -> tuple[list[Work], Pool, list[str]]:
    ds = [d if isinstance(d, Demand) else Demand.of(d) for d in demands]
    ds.sort(key=lambda d: d.workload)
    resources = sorted(
        {r for d in ds for r, a in d.requests.items() if a > 0 and r not in dev.DEVICE_RESOURCES}
    )
    index = {r: i for i, r in enumerate(resources)}
    pool = Pool(nodes, resources)
    ws = [
        Work(
            d,
            tuple(sorted((index[r], a) for r, a in d.requests.items() if a > 0 and r in index)),
            dev.device_request(d.requests, d.joint_allocate),
        )
        for d in ds
    ]
    _shares(ws, pool, resources)
    return ws, pool, resources


class Census:
    """What every class holds once filling is over, to say who a short workload lost to."""

    def __init__(self, ws: list[Work], pool: Pool) -> None:
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

    def exhausted(self, w: Work, resources: list[str]) -> tuple[list[str], bool, bool]:
        """(resources that ran out, devices fit nowhere, fragmented: each fits somewhere alone)."""
        out = [resources[r] for r, a in w.req if self.max_free[r] < a - TOL * max(1.0, a)]
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

    def rivals(self, w: Work, phase: str) -> tuple[int, int, int]:
        """Replicas held by higher classes, by peers, by others' floors, in the phase w lost."""
        held = self.held if phase == "floor" else self.above
        own = w.n if phase == "floor" else max(0, w.n - w.floor)
        higher = sum(held[c] for c in self.classes if c < w.cls)
        floors = 0 if phase == "floor" else self.floors - min(w.n, w.floor)
        return higher, held[w.cls] - own, floors


def grant(w: Work, census: Census, resources: list[str]) -> Grant:
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
