"""DeciderCore's stage 2: a pool with inventory is decided as a whole (allocation, damping,
failures, shortfalls), checkpointed and replayable from the journal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from governor.cores.decider import DeciderCore, Outputs, pool_key
from governor.events import Device, LoadWindow, NodeState, WorkloadState
from governor.spec import ScalingPolicy
from governor_decider import journal
from tests.support.policies import scaling_policy

POOL = "gpu"
# No damping in stage 1 (it has its own tests): stage 2 is what these tests look at.
FAST = {
    "scaleUp": {"policies": [{"type": "Pods", "value": 100, "periodSeconds": 15}]},
    "scaleDown": {
        "stabilizationWindowSeconds": 0,
        "policies": [{"type": "Pods", "value": 100, "periodSeconds": 15}],
    },
}
WEB, TRAIN = "shop/Deployment/web", "ml/PyTorchJob/train"
GPU = {"nvidia.com/gpu": 1.0, "cpu": 2.0}
JOB = {"nvidia.com/gpu": 1.0, "koordinator.sh/rdma": 1.0, "cpu": 4.0}
JOINT = {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}


def web_policy(pool: str = POOL) -> ScalingPolicy:
    return scaling_policy(
        "web",
        "shop",
        {
            "targetRef": {"kind": "Deployment", "name": "web"},
            "minReplicas": 2,
            "maxReplicas": 16,
            "priority": 1000,
            "pool": pool,
            "metrics": [{"name": "rps", "target": {"type": "AverageValue", "averageValue": 70}}],
            "behavior": FAST,
        },
    )


def job_policy(interval: float = 300) -> ScalingPolicy:
    return scaling_policy(
        "train",
        "ml",
        {
            "targetRef": {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "name": "train",
            },
            "minReplicas": 1,
            "maxReplicas": 16,
            "priority": 0,
            "pool": POOL,
            "metrics": [{"name": "work", "target": {"type": "AverageValue", "averageValue": 1}}],
            "behavior": FAST,
            "elastic": {
                "floor": 4,
                "restartPenaltySeconds": 30,
                "scalingEfficiency": 0.9,
                "minResizeIntervalSeconds": interval,
            },
        },
    )


def gpu_node(name: str, **health: bool) -> NodeState:
    """8 GPUs over 4 PCIe switches with one 8-VF NIC each (minor = switch)."""
    devices = [Device(type="gpu", minor=m, pcie=str(m // 2), numa=m // 4) for m in range(8)]
    devices += [
        Device(type="rdma", minor=s, pcie=str(s), numa=s // 2, free=8, total=8) for s in range(4)
    ]
    devices = [
        msgspec.structs.replace(d, healthy=health.get(f"{d.type}{d.minor}", True)) for d in devices
    ]
    return NodeState(node=name, pool=POOL, allocatable={"cpu": 96.0}, devices=devices)


def windows(workload: str, metric: str, value: float, now: float) -> list[LoadWindow]:
    return [
        LoadWindow(
            workload=workload, metric=metric, window="stable", start=now - 60, end=now,
            count=60, mean=value, max=value, p95=value, newest_sample=now - 0.5,
        )
    ]  # fmt: skip


def states(web: int, train: int, now: float) -> list[WorkloadState]:
    return [
        WorkloadState(
            workload=WEB, spec_replicas=web, ready_replicas=web, observed_at=now,
            requests=GPU, pool=POOL,
        ),
        WorkloadState(
            workload=TRAIN, spec_replicas=train, ready_replicas=train, observed_at=now,
            requests=JOB, pool=POOL, joint_allocate=JOINT, restarts=0, started_at=now - 7200,
        ),
    ]  # fmt: skip


class Driver:
    """Feeds a core and, like the service, journals every input (to check replay)."""

    def __init__(self, path: Path, core: DeciderCore | None = None) -> None:
        self.core = core or DeciderCore()
        self.journal = journal.Journal(path)
        self.decided: list[Any] = []

    def policy(self, p: ScalingPolicy) -> None:
        self.core.on_policy(p.key, p)
        self.journal.policy(p.key, p)

    def node(self, n: NodeState) -> None:
        self.core.on_node(n)
        self.journal.node(n)

    def workload(self, s: WorkloadState) -> None:
        self.core.on_workload(s)
        self.journal.workload(s)

    def window(self, w: LoadWindow) -> None:
        self.core.on_window(w)
        self.journal.window(w)

    def cycle(self, now: float, web_rps: float, train_work: float = 16.0) -> Outputs:
        for w in windows(WEB, "rps", web_rps, now) + windows(TRAIN, "work", train_work, now):
            self.window(w)
        for wl in (WEB, TRAIN):
            self.journal.decide(wl, now)
            out = self.core.decide(wl, now)
            assert out.decision is None, "stage 2 decides pools with inventory"
        self.journal.decide_pool(POOL, now)
        out = self.core.decide_pool(POOL, now)
        self.decided += out.decisions
        return out


def two_nodes(path: Path) -> Driver:
    """The web service and the training job on the GPU nodes a and b, journaled at `path`."""
    drv = Driver(path)
    drv.policy(web_policy())
    drv.policy(job_policy())
    for n in (gpu_node("a"), gpu_node("b")):
        drv.node(n)
    return drv


def replicas(out: Outputs) -> dict[str, int]:
    return {d.workload: d.to_replicas for d in out.decisions}


def test_without_inventory_the_bounds_path_decides_on_the_event(tmp_path: Path) -> None:
    core = DeciderCore()
    core.on_policy("shop/web", web_policy(pool="elsewhere"))
    core.on_node(gpu_node("a"))  # a node of another pool
    core.on_workload(states(4, 4, 999.0)[0])
    for w in windows(WEB, "rps", 700.0, 1000.0):
        core.on_window(w)
    out = core.decide(WEB, 1000.0)
    assert out.decision is not None and out.decision.to_replicas == 10
    assert core.decide_pool("elsewhere", 1000.0).note.endswith("no inventory")


def test_stage2_burst_failure_and_return(tmp_path: Path) -> None:
    drv = two_nodes(tmp_path / "journal")
    t = 10_000.0
    web_n, train_n = 4, 12
    for s in states(web_n, train_n, t - 1):
        drv.workload(s)

    def follow(out: Outputs, now: float) -> None:
        nonlocal web_n, train_n
        got = replicas(out)
        web_n, train_n = got.get(WEB, web_n), got.get(TRAIN, train_n)
        for s in states(web_n, train_n, now):
            drv.workload(s)

    # Calm: the service wants 4 (280 rps / 70), the job 16 of which 12 fit: a shortfall, once.
    out = drv.cycle(t, 280.0)
    assert replicas(out) == {}
    assert [(s.workload, s.wanted, s.granted) for s in out.shortfalls] == [(TRAIN, 16, 12)]
    assert out.checkpoints and out.checkpoints[0].workload == pool_key(POOL)
    assert drv.cycle(t + 5, 280.0).shortfalls == []  # not every cycle

    # Burst: 840 rps wants 12 replicas; the job is shrunk to its floor in the same cycle.
    out = drv.cycle(t + 10, 840.0)
    assert replicas(out) == {WEB: 12, TRAIN: 4}
    d_train = next(d for d in out.decisions if d.workload == TRAIN)
    assert {r.rule for r in d_train.reasons} & {"priority", "device_fit"}
    assert d_train.target is not None and d_train.target.kind == "PyTorchJob"
    # Checkpoints (the pool's allocation, each workload's seq) come before the decisions.
    assert {c.workload for c in out.checkpoints} >= {pool_key(POOL), WEB, TRAIN}
    assert [(s.workload, s.granted) for s in out.shortfalls] == [(TRAIN, 4)]
    follow(out, t + 11)

    # Calm again: room frees, but the job's last resize was 20 s ago: the grow is held.
    out = drv.cycle(t + 30, 280.0)
    assert replicas(out).get(WEB) == 4
    follow(out, t + 31)
    out = drv.cycle(t + 35, 280.0)
    assert TRAIN not in replicas(out)
    held = drv.core.memory[TRAIN].elastic
    assert held.pending_since is not None
    # Past the interval, the job takes its GPUs back in one resize.
    now = t + 40
    while TRAIN not in replicas(out) and now < t + 700:
        out = drv.cycle(now, 280.0)
        now += 5
    assert replicas(out)[TRAIN] == 12
    resize = next(d for d in out.decisions if d.workload == TRAIN)
    assert resize.decided_at >= t + 10 + 300
    follow(out, now)
    assert drv.core.memory[TRAIN].elastic.resizes == 2

    # A NIC and two GPUs of node a fail: the job's replicas are recomputed, the service keeps 4.
    drv.node(gpu_node("a", rdma0=False, rdma1=False, gpu6=False, gpu7=False))
    out = drv.cycle(now + 5, 280.0)
    assert WEB not in replicas(out)
    assert replicas(out)[TRAIN] < 12
    assert [s.workload for s in out.shortfalls] == [TRAIN]
    assert out.shortfalls[0].granted == replicas(out)[TRAIN]
    drv.journal.close()

    # The journal replays to the same decisions.
    replayed = [
        d
        for _, o in journal.replay(journal.read(tmp_path / "journal"), DeciderCore)
        for d in ([o.decision] if o.decision else []) + o.decisions
    ]
    assert replayed == drv.decided


def test_pool_checkpoint_restores_the_allocation_and_seq(tmp_path: Path) -> None:
    drv = two_nodes(tmp_path / "j")
    for s in states(4, 12, 999.0):
        drv.workload(s)
    out = drv.cycle(1000.0, 840.0)
    cps = {c.workload: c for c in out.checkpoints}
    fresh = DeciderCore()
    for cp in cps.values():
        fresh.on_checkpoint(msgspec.json.decode(msgspec.json.encode(cp), type=type(cp)))
    pool = fresh.pools[POOL]
    assert pool.allocation == drv.core.pools[POOL].allocation
    assert pool.seq == drv.core.pools[POOL].seq
    assert fresh.memory[TRAIN].elastic == drv.core.memory[TRAIN].elastic
    # An older pool checkpoint does not go back.
    older = msgspec.structs.replace(cps[pool_key(POOL)], seq=0, allocation=b"")
    fresh.on_checkpoint(older)
    assert fresh.pools[POOL].allocation is not None


def test_node_tombstone_returns_the_pool_to_the_bounds_path() -> None:
    core = DeciderCore()
    core.on_policy("shop/web", web_policy())
    core.on_node(gpu_node("a"))
    core.on_workload(states(4, 4, 999.0)[0])
    for w in windows(WEB, "rps", 700.0, 1000.0):
        core.on_window(w)
    assert core.decide(WEB, 1000.0).decision is None
    core.on_node_deleted("a")
    out = core.decide(WEB, 1001.0)
    assert out.decision is not None and out.decision.to_replicas == 10


def test_elastic_damping_on_the_bounds_path() -> None:
    core = DeciderCore()
    core.on_policy("ml/train", job_policy())
    t = 5000.0
    core.on_workload(states(0, 8, t - 1)[1])
    for w in windows(TRAIN, "work", 4.0, t):
        core.on_window(w)
    first = core.decide(TRAIN, t).decision  # a voluntary shrink 8 -> 4: no resize yet, so it goes
    assert first is not None and first.to_replicas == 4
    core.on_workload(msgspec.structs.replace(states(0, 4, t + 1)[1], spec_replicas=4))
    for w in windows(TRAIN, "work", 8.0, t + 20):
        core.on_window(w)
    out = core.decide(TRAIN, t + 20)  # grow 4 -> 8 within the interval: held, with the rule
    assert out.decision is None
    assert core.memory[TRAIN].elastic.pending_since == t + 20


def test_a_published_throughput_metric_is_remembered_per_replica_count() -> None:
    core = DeciderCore()
    core.on_policy("ml/train", job_policy())
    t = 5000.0
    core.on_workload(states(0, 8, t - 1)[1])
    for w in windows(TRAIN, "work", 8.0, t) + windows(TRAIN, "throughput", 640.0, t):
        core.on_window(w)
    core.decide(TRAIN, t)
    assert core.memory[TRAIN].elastic.throughput == {8: 640.0}
