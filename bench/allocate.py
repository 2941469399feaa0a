"""How long one allocation of a large pool takes: 1,000 workloads on 500 GPU nodes.

Each node: 96 cores, 1 TiB, 8 GPUs and 4–8 RDMA NICs over 2 NUMA nodes / 4 PCIe switches, about
2 % of devices unhealthy and some GPUs partly taken by unmanaged pods. Workloads: CPU services,
fractional-GPU inference, GPU+RDMA elastic training with SamePCIe / SameNUMA joint allocation, in
5 tiers, with demand well above capacity so that floors, tiers and fair share all bind.

Prints the median of a fresh allocation, of one with the previous allocation kept (hysteresis),
of one where demand moved past the margin, and where the time goes (cProfile, top functions).
Then the same pool under namespace ResourceQuotas (one per namespace: requests.cpu, limits.cpu,
count/pods, requests.nvidia.com/gpu, at about 60 % of what the namespace asks) and Volcano queues
(two teams under a root queue, each with capability, guarantee and deserved; one not
reclaimable): its time beside the unconstrained one, measured in the same run (the ratio).

    uv run python bench/allocate.py [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import time
from collections.abc import Callable

from governor.events import Device, NodeState, QueueState, QuotaState
from governor.policy import devices as dev
from governor.policy.allocate import Demand, allocate
from governor.policy.quotas import Constraints, constraints

TARGET_SECONDS = 1.0


def device(
    dtype: str, minor: int, healthy: bool, numa: int, switch: int, free: float, total: float
) -> Device:
    """A device on NUMA node `numa` (its CPU socket has the same number), behind PCIe switch
    `switch`."""
    return Device(
        type=dtype,
        minor=minor,
        healthy=healthy,
        socket=numa,
        numa=numa,
        pcie=f"pci{switch}",
        free=free,
        total=total,
    )


def make_nodes(rng: random.Random, count: int = 500) -> list[NodeState]:
    nodes = []
    for n in range(count):
        devices = []
        for minor in range(8):
            free = 100.0 if rng.random() > 0.1 else rng.choice([0.0, 50.0])
            devices.append(
                device("gpu", minor, rng.random() > 0.02, minor // 4, minor // 2, free, 100.0)
            )
        for minor in range(rng.choice([4, 4, 8])):
            switch = minor % 4
            healthy = rng.random() > 0.02
            free = float(rng.choice([1, 4, 8]))
            devices.append(device("rdma", minor, healthy, switch // 2, switch, free, 8.0))
        nodes.append(
            NodeState(
                node=f"node-{n:03d}",
                pool="gpu",
                allocatable={"cpu": 96.0, "memory": 1024.0 * 2**30, "pods": 110.0},
                requested_unmanaged={
                    "cpu": rng.uniform(0, 8),
                    "memory": rng.uniform(0, 64) * 2**30,
                },
                devices=devices,
            )
        )
    return nodes


def make_demands(rng: random.Random, count: int = 1000) -> list[Demand]:
    out = []
    for k in range(count):
        tier = rng.choice([0, 100, 1000, 10000, 100000])
        kind = rng.random()
        if kind < 0.6:  # CPU service
            want = rng.randint(1, 60)
            requests = {
                "cpu": rng.choice([0.25, 0.5, 1, 2, 4]),
                "memory": rng.choice([1, 2, 4, 8]) * 2**30,
            }
            joint, elastic = None, False
        elif kind < 0.75:  # inference on a GPU share
            want = rng.randint(1, 16)
            requests = {
                "cpu": 2.0,
                "memory": 16 * 2**30,
                dev.GPU_CORE: float(rng.choice([25, 50])),
            }
            joint, elastic = None, False
        else:  # elastic training with GPUs + RDMA
            want = rng.randint(1, 32)
            gpus = rng.choice([1, 2, 4, 8])
            requests = {
                "cpu": 8.0 * gpus,
                "memory": 64 * gpus * 2**30,
                dev.GPU: float(gpus),
                dev.RDMA: 1.0,
            }
            scope = rng.choice(["SamePCIe", "SameNUMA", None])
            joint = {"deviceTypes": ["gpu", "rdma"]}
            if scope:
                joint["requiredScope"] = scope
            elastic = True
        out.append(
            Demand(
                workload=f"ns{k % 37}/Deployment/w{k:04d}",
                want=want,
                floor=min(want, rng.randint(0, 3)),
                tier=tier,
                weight=rng.choice([1.0, 1.0, 2.0, 4.0]),
                elastic=elastic,
                requests=requests,
                joint_allocate=joint,
            )
        )
    return out


def make_limits(rng: random.Random, demands: list[Demand]) -> Constraints:
    by_ns: dict[str, list[Demand]] = {}
    for d in demands:
        by_ns.setdefault(d.workload.partition("/")[0], []).append(d)
    quotas = []
    for ns, ds in sorted(by_ns.items()):
        cost = {
            d.workload: {
                "requests.cpu": d.requests.get("cpu", 0.0),
                "limits.cpu": 2 * d.requests.get("cpu", 0.0),
                "count/pods": 1.0,
                "requests.nvidia.com/gpu": d.requests.get(dev.GPU, 0.0),
            }
            for d in ds
        }
        asked = {
            r: sum(d.want * c[r] for d, c in zip(ds, cost.values(), strict=True))
            for r in ("requests.cpu", "limits.cpu", "count/pods", "requests.nvidia.com/gpu")
        }
        quotas.append(
            QuotaState(
                quota=f"{ns}/compute",
                namespace=ns,
                hard={r: round(a * rng.uniform(0.4, 0.8)) for r, a in asked.items()},
                unmanaged={"requests.cpu": rng.uniform(0, 4)},
                covers=cost,
            )
        )
    teams = {"team-a": [], "team-b": []}  # type: dict[str, list[Demand]]
    for d in demands:
        teams["team-a" if int(d.workload.split("/w")[-1]) % 2 else "team-b"].append(d)
    queues = [QueueState(queue="root", capability={"cpu": 40000.0, dev.GPU: 3600.0})]
    for k, (name, ds) in enumerate(sorted(teams.items())):
        queues.append(
            QueueState(
                queue=name,
                parent="root",
                capability={"cpu": 24000.0, dev.GPU: 2000.0 + 400 * k},
                guarantee={dev.GPU: 800.0, "cpu": 6000.0},
                deserved={dev.GPU: 1800.0, "cpu": 20000.0},
                weight=1 + k,
                reclaimable=k == 0,
                covers={d.workload: dict(d.requests) for d in ds},
            )
        )
    return constraints(quotas, queues, [d.workload for d in demands], {})


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds (CPU time is what a loaded shared machine distorts least)."""
    wall, cpu = [], []
    for _ in range(repeat):
        dev.place.cache_clear()  # every evaluation pays its own placement work
        dev.count_fit.cache_clear()
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", action="store_true", help="print the top functions")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(7)
    nodes = make_nodes(rng)
    demands = make_demands(rng)
    first = allocate(demands, nodes)
    granted = sum(first.replicas().values())
    wanted = sum(d.want for d in demands)
    short = sum(1 for g in first.grants.values() if g.short > 0)
    rules: dict[str, int] = {}
    for g in first.grants.values():
        rules[g.rule] = rules.get(g.rule, 0) + 1
    print(f"pool: {len(nodes)} nodes, {len(demands)} workloads, {wanted} replicas wanted")
    print(
        f"granted {granted} replicas; {short} workloads short; rules {dict(sorted(rules.items()))}"
    )

    moved = [
        Demand(**{**{f: getattr(d, f) for f in d.__struct_fields__}, "want": d.want * 2})
        for d in demands
    ]
    fresh = timed(lambda: allocate(demands, nodes), args.repeat)
    kept = timed(lambda: allocate(demands, nodes, first), args.repeat)
    assert allocate(demands, nodes, first).kept_previous
    redo = timed(lambda: allocate(moved, nodes, first), args.repeat)
    for name, (secs, cpu) in (("fresh", fresh), ("previous kept", kept), ("demand moved", redo)):
        ratio = secs / TARGET_SECONDS
        print(
            f"{name:>14}: {secs * 1000:7.1f} ms wall, {cpu * 1000:7.1f} ms CPU per evaluation"
            f" ({ratio:.2f}× the 1 s target)"
        )
    limits = make_limits(rng, demands)
    bound = allocate(demands, nodes, constraints=limits)
    by_limit: dict[str, int] = {}
    for g in bound.grants.values():
        if g.limit:
            kind = g.limit.partition(":")[0]
            by_limit[kind] = by_limit.get(kind, 0) + 1
    print(
        f"with {sum(1 for x in limits.limits if x.name.startswith('quota:'))} quotas, "
        f"{sum(1 for x in limits.limits if x.name.startswith('queue:'))} queue capabilities "
        f"(a root and {len(limits.queues)} team queues): "
        f"granted {sum(bound.replicas().values())} replicas; "
        f"workloads bound by {dict(sorted(by_limit.items()))}"
    )
    base = timed(lambda: allocate(demands, nodes), args.repeat)
    limited = timed(lambda: allocate(demands, nodes, constraints=limits), args.repeat)
    kept_limited = timed(lambda: allocate(demands, nodes, bound, constraints=limits), args.repeat)
    assert allocate(demands, nodes, bound, constraints=limits).kept_previous
    print(
        f"   no limits: {base[0] * 1000:7.1f} ms wall, {base[1] * 1000:7.1f} ms CPU\n"
        f"  quotas+queues: {limited[0] * 1000:7.1f} ms wall, {limited[1] * 1000:7.1f} ms CPU"
        f" ({limited[1] / base[1]:.2f}× the CPU time without them, same run)\n"
        f"  quotas+queues, previous kept: {kept_limited[0] * 1000:7.1f} ms wall,"
        f" {kept_limited[1] * 1000:7.1f} ms CPU"
    )
    dev.place.cache_clear()
    prof = cProfile.Profile()
    prof.enable()
    allocate(demands, nodes)
    prof.disable()
    stats = pstats.Stats(prof)
    total = max(t for (_, _, fn), (_, _, _, t, _) in stats.stats.items() if fn == "allocate")  # type: ignore[attr-defined]
    # Cumulative, so nested lines are part of the line above them.
    parts = {
        "inventory: Device topology of every node": ("devices.py", "topology"),
        "floors, packed first-fit-decreasing": ("allocate.py", "_pack"),
        "progressive filling (heap, first-fit, placement)": ("allocate.py", "_fill"),
        "  placing one replica on one node (all phases)": ("allocate.py", "place_on"),
        "    its devices (devices.place, cache misses included)": ("devices.py", "place"),
        "rules, shortfall attribution": ("allocate.py", "_grant"),
    }
    print(f"where the time goes (cProfile, {total * 1000:.0f} ms with its overhead; cumulative):")
    for label, (file, name) in parts.items():
        cum = sum(
            t
            for (path, _, fn), (_, _, _, t, _) in stats.stats.items()  # type: ignore[attr-defined]
            if fn == name and path.endswith(file)
        )
        print(f"  {cum / total:6.1%}  {label}")
    if args.profile:
        stats.sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
