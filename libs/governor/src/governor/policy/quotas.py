"""Namespace ResourceQuotas and Volcano Queues as constraints of a pool's allocation (pure).

`constraints` turns the quotas and queues the cluster side published into what `allocate` needs:

* a `Limit` per quota and per queue capability that covers a workload of the pool: its total
  (`spec.hard`, `spec.capability`), what is held outside this allocation (`fixed`: the pods
  governor does not scale, and the covered workloads of OTHER pools at the replicas they run —
  a quota spans the namespace, pools do not split it), and each covered workload's cost of one
  replica. A hierarchical queue's capability covers its descendants' workloads too;
* a `QueueShare` per queue with workloads in the pool: its `guarantee` (kept free of other
  queues' replicas up to what the queue itself asks for), its `deserved` (inside a tier, queues
  below their deserved share fill first; without an explicit deserved, the queues' weights
  divide the pool, as Volcano's proportion plugin does) and `reclaimable`.

With no quota and no queue the result is empty and allocation runs exactly as without it.

Not modelled: a guarantee or deserved share set on a parent queue (they are read on the queue
that holds the workloads; a parent's capability does cover its children), and a Closed queue's
refusal of new jobs (its state is published and shown, not enforced here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from governor.events import QueueState, QuotaState


class Limit(msgspec.Struct, frozen=True, kw_only=True):
    """A budget on the sum of the covered workloads' replicas, resource by resource."""

    name: str  # "quota:<ns>/<name>" | "queue:<name>"
    label: str  # how a reason names it: "quota: shop/compute-quota", "queue: research capability"
    total: dict[str, float]
    fixed: dict[str, float] = msgspec.field(default_factory=dict)
    cost: dict[str, dict[str, float]] = msgspec.field(default_factory=dict)  # per replica


class QueueShare(msgspec.Struct, frozen=True, kw_only=True):
    """How a queue's guarantee, deserved share and reclaimability shape the pool's fill."""

    queue: str
    members: tuple[str, ...]
    guarantee: dict[str, float] = msgspec.field(default_factory=dict)
    deserved: dict[str, float] = msgspec.field(default_factory=dict)
    weight: int = 1
    reclaimable: bool = True
    fixed: dict[str, float] = msgspec.field(default_factory=dict)  # held by unmanaged pods


class Constraints(msgspec.Struct, frozen=True, kw_only=True):
    limits: tuple[Limit, ...] = ()
    queues: tuple[QueueShare, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.limits and not self.queues


NONE = Constraints()


def _add(into: dict[str, float], more: Mapping[str, float], times: float = 1.0) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0.0) + v * times


def _subtree(queues: Mapping[str, QueueState], root: str) -> list[QueueState]:
    """`root` and every queue below it (a parent cycle is cut where it closes)."""
    children: dict[str, list[str]] = {}
    for q in queues.values():
        if q.parent and q.parent != q.queue:
            children.setdefault(q.parent, []).append(q.queue)
    out, todo, seen = [], [root], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in queues:
            continue
        seen.add(name)
        out.append(queues[name])
        todo += sorted(children.get(name, []))
    return out


def _limit(
    name: str,
    label: str,
    total: Mapping[str, float],
    unmanaged: Mapping[str, float],
    covers: Mapping[str, Mapping[str, float]],
    pool: set[str],
    current: Mapping[str, int],
) -> Limit | None:
    mine = {w: dict(c) for w, c in covers.items() if w in pool}
    if not mine or not total:
        return None
    fixed = {r: unmanaged.get(r, 0.0) for r in total}
    for w, c in covers.items():
        if w not in pool:
            _add(fixed, {r: a for r, a in c.items() if r in total}, current.get(w, 0))
    cost = {w: {r: a for r, a in c.items() if r in total and a > 0} for w, c in mine.items()}
    return Limit(name=name, label=label, total=dict(total), fixed=fixed, cost=cost)


def constraints(
    quotas: Iterable[QuotaState],
    queues: Iterable[QueueState],
    pool_workloads: Iterable[str],
    current: Mapping[str, int],
) -> Constraints:
    """The pool's constraints; `current`: the replicas each workload of any pool runs."""
    pool = set(pool_workloads)
    limits: list[Limit] = []
    for rq in sorted(quotas, key=lambda rq: rq.quota):
        lim = _limit(
            f"quota:{rq.quota}",
            f"quota: {rq.quota}",
            rq.hard,
            rq.unmanaged,
            rq.covers,
            pool,
            current,
        )
        if lim is not None:
            limits.append(lim)
    by_name = {q.queue: q for q in queues}
    shares: list[QueueShare] = []
    for name in sorted(by_name):
        tree = _subtree(by_name, name)
        covers: dict[str, dict[str, float]] = {}
        unmanaged: dict[str, float] = {}
        for sub in tree:
            covers.update(sub.covers)
            _add(unmanaged, sub.unmanaged)
        q = by_name[name]
        lim = _limit(
            f"queue:{name}",
            f"queue: {name} capability",
            q.capability,
            unmanaged,
            covers,
            pool,
            current,
        )
        if lim is not None:
            limits.append(lim)
        members = tuple(sorted(w for w in q.covers if w in pool))
        if members:
            shares.append(
                QueueShare(
                    queue=name,
                    members=members,
                    guarantee=dict(q.guarantee),
                    deserved=dict(q.deserved),
                    weight=max(1, q.weight),
                    reclaimable=q.reclaimable,
                    fixed=dict(q.unmanaged),
                )
            )
    return Constraints(limits=tuple(limits), queues=tuple(shares))


# --- the ledger allocation keeps while it fills -----------------------------------------------

_TOL = 1e-9

Refusal = tuple[str, int]  # ("hard" | "reserve" | "deserved", index of the limit or share)


def _amount(resource: str, value: float) -> str:
    if ("memory" in resource or "storage" in resource) and value >= 2**20:
        return f"{value / 2**30:.4g}Gi"
    return f"{value:.6g}"


class Ledger:
    """What the limits and queues have left while `allocate` places replicas one at a time.

    Mutable working state, discarded when the allocation returns; `reset` goes back to nothing
    placed. `capacity` is the pool's total per resource named as in requests."""

    def __init__(
        self,
        cons: Constraints,
        wants: Mapping[str, int],
        requests: Mapping[str, Mapping[str, float]],
        capacity: Mapping[str, float],
    ) -> None:
        self.limits = cons.limits
        self.shares = cons.queues
        self._res = [sorted(lim.total) for lim in self.limits]
        self._left0 = [
            [lim.total[r] - lim.fixed.get(r, 0.0) for r in res]
            for lim, res in zip(self.limits, self._res, strict=True)
        ]
        self.rows: dict[str, list[tuple[int, tuple[tuple[int, float], ...]]]] = {}
        for i, lim in enumerate(self.limits):
            index = {r: j for j, r in enumerate(self._res[i])}
            for w, c in lim.cost.items():
                cost = tuple(sorted((index[r], a) for r, a in c.items() if r in index and a > 0))
                self.rows.setdefault(w, []).append((i, cost))
        self.share_of = {w: k for k, s in enumerate(self.shares) for w in s.members}
        deserved = [dict(s.deserved) for s in self.shares]
        if len(self.shares) > 1 and not any(deserved):
            # Volcano's proportion plugin: without deserved, the weights divide the pool.
            weights = sum(s.weight for s in self.shares)
            names = {
                r
                for s in self.shares
                for w in s.members
                for r in requests.get(w, {})
                if capacity.get(r, 0.0) > 0
            }
            deserved = [
                {r: capacity.get(r, 0.0) * s.weight / weights for r in sorted(names)}
                for s in self.shares
            ]
        self.deserved = deserved
        self.goal: list[dict[str, float]] = []
        for s in self.shares:
            asked = dict(s.fixed)
            for w in s.members:
                _add(asked, requests.get(w, {}), max(0, wants.get(w, 0)))
            self.goal.append({r: min(g, asked.get(r, 0.0)) for r, g in s.guarantee.items()})
        self.guarded = sorted({r for g in self.goal for r, a in g.items() if a > 0})
        self.requests = requests
        self.capacity = {r: capacity.get(r, 0.0) for r in self.guarded}
        self.reset()

    def reset(self) -> None:
        self.left = [list(v) for v in self._left0]
        self.deferred: dict[str, int] = {}  # workload -> the share whose guarantee stopped it
        self.held = [dict(s.fixed) for s in self.shares]
        self.free = dict(self.capacity)
        for s in self.shares:
            for r, a in s.fixed.items():
                if r in self.free:
                    self.free[r] -= a

    def _reserve(self, k: int, r: str) -> float:
        return max(0.0, self.goal[k].get(r, 0.0) - self.held[k].get(r, 0.0))

    def refuses(self, workload: str, *, deserved: bool = False) -> Refusal | None:
        """Why one more replica of `workload` may not be placed now, if it may not."""
        for i, cost in self.rows.get(workload, ()):
            left = self.left[i]
            for j, a in cost:
                if left[j] < a - _TOL * max(1.0, a):
                    return ("hard", i)
        req = self.requests.get(workload, {})
        mine = self.share_of.get(workload)
        for r in self.guarded:
            a = req.get(r, 0.0)
            if a <= 0:
                continue
            others = [(self._reserve(k, r), k) for k in range(len(self.shares)) if k != mine]
            need = sum(v for v, _ in others)
            if need > 0 and self.free[r] - a < need - _TOL * max(1.0, need):
                k = max(others)[1]
                self.deferred[workload] = k
                return ("reserve", k)
        if deserved and mine is not None:
            held = self.held[mine]
            for r, d in self.deserved[mine].items():
                a = req.get(r, 0.0)
                if a > 0 and held.get(r, 0.0) + a > d + _TOL * max(1.0, d):
                    return ("deserved", mine)
        return None

    def take(self, workload: str) -> None:
        for i, cost in self.rows.get(workload, ()):
            for j, a in cost:
                self.left[i][j] -= a
        req = self.requests.get(workload, {})
        mine = self.share_of.get(workload)
        if mine is not None:
            _add(self.held[mine], req)
        for r in self.guarded:
            self.free[r] -= req.get(r, 0.0)

    def has_deserved(self) -> bool:
        return any(self.deserved)

    def fits(self, counts: Mapping[str, int]) -> bool:
        """Do these replica counts stay within every limit (hysteresis keeps nothing else)."""
        for i, lim in enumerate(self.limits):
            for j, r in enumerate(self._res[i]):
                use = sum(counts.get(w, 0) * c.get(r, 0.0) for w, c in lim.cost.items())
                if use > self._left0[i][j] + _TOL * max(1.0, use):
                    return False
        return True

    def room(self) -> dict[str, dict[str, float]]:
        """What each limit leaves the pool's workloads (its total minus what is held outside)."""
        return {
            lim.name: dict(zip(self._res[i], self._left0[i], strict=True))
            for i, lim in enumerate(self.limits)
        }

    def protected(self, previous: Mapping[str, int], wants: Mapping[str, int]) -> dict[str, int]:
        """Replicas a non-reclaimable queue's workloads already hold: kept like floors."""
        out: dict[str, int] = {}
        for s in self.shares:
            if not s.reclaimable:
                for w in s.members:
                    out[w] = min(previous.get(w, 0), wants.get(w, 0))
        return out

    def binding(self, workload: str) -> tuple[str, str] | None:
        """(limit name, "quota: ns/q requests.cpu 38/40") of what stops `workload` now."""
        why = self.refuses(workload)
        if why is None:
            if workload not in self.deferred:
                return None
            why = ("reserve", self.deferred[workload])
        kind, i = why
        req = self.requests.get(workload, {})
        if kind == "hard":
            lim = self.limits[i]
            cost = dict(self.rows[workload])[i]
            for j, a in cost:
                if self.left[i][j] < a - _TOL * max(1.0, a):
                    r = self._res[i][j]
                    used = lim.total[r] - self.left[i][j]
                    total = lim.total[r]
                    return lim.name, f"{lim.label} {r} {_amount(r, used)}/{_amount(r, total)}"
        s = self.shares[i]
        for r in self.guarded:
            if req.get(r, 0.0) > 0 and s.guarantee.get(r, 0.0) > 0:
                g = s.guarantee.get(r, 0.0)
                held = self.held[i].get(r, 0.0)
                return (
                    f"queue:{s.queue}",
                    f"queue: {s.queue} guarantee {r} {_amount(r, held)}/{_amount(r, g)}",
                )
        return f"queue:{s.queue}", f"queue: {s.queue} guarantee"
