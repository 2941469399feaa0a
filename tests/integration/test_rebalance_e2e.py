"""Stage 2 in the running system: the decider as a process on the real broker, fed nodes with
devices (governor.cluster), workload states, policies and load windows; decisions and
shortfalls out.

The pool (unique to this test) has two nodes of 8 GPUs and 2 RDMA NICs of 4 VFs each; a
GPU inference service (tier 1000) and an elastic training job (tier 0) both need one GPU and one
NIC VF per replica. The test plays the cluster (it follows each decision with a WorkloadState):

1. calm: the service wants 4, the job 16 of which 12 fit: a shortfall for the job, once;
2. burst: the service wants 12; the job is shrunk to its floor (4) in the same cycle;
3. moderate load: the service goes to 8 and the job, once its resize interval has passed, to 8;
4. NIC 0 of node a turns unhealthy: 4 VFs fewer — the job's replicas are recomputed (8 -> 4), the
   service keeps its 8, and a shortfall appears for the job;
and the decider's journal replays through DeciderCore to the same decisions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from governor import events
from governor.bus import Consumer, Producer
from governor.topics import ensure_topics
from governor_decider import journal
from tests.support.policies import policy_record, scaling_policy_obj
from tests.support.procs import governor_service

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REQ = {"nvidia.com/gpu": 1.0, "koordinator.sh/rdma": 1.0, "cpu": 2.0}
FAST = {
    "scaleUp": {"policies": [{"type": "Pods", "value": 100, "periodSeconds": 15}]},
    "scaleDown": {
        "stabilizationWindowSeconds": 0,
        "policies": [{"type": "Pods", "value": 100, "periodSeconds": 15}],
    },
}


def policy(ns: str, name: str, pool: str, **spec: Any) -> events.PolicyRecord:
    defaults = {
        "minReplicas": 1,
        "maxReplicas": 16,
        "pool": pool,
        "behavior": FAST,
        "fallback": {"staleAfterSeconds": 3600, "replicas": 2},
    }
    return policy_record(scaling_policy_obj(ns, name, **{**defaults, **spec}))


def node(name: str, pool: str, bad_nics: tuple[int, ...] = ()) -> events.NodeState:
    devices = [events.Device(type="gpu", minor=m, pcie=str(m // 4), numa=m // 4) for m in range(8)]
    devices += [
        events.Device(
            type="rdma", minor=n, pcie=str(n), numa=n, free=4, total=4, healthy=n not in bad_nics
        )
        for n in range(2)
    ]
    return events.NodeState(
        node=name,
        pool=pool,
        allocatable={"cpu": 64.0, "memory": 256e9},
        devices=devices,
        observed_at=time.time(),
    )


async def test_rebalance_on_the_running_system(
    kafka_bootstrap: str, tmp_path: Path, unique_suffix: str
) -> None:
    bootstrap = kafka_bootstrap
    await ensure_topics(bootstrap)
    ns, pool = f"rb-{unique_suffix}", f"pool-{unique_suffix}"
    web, job = f"{ns}/Deployment/web", f"{ns}/Deployment/train"
    ours = {web, job}
    nodes = [f"{pool}-a", f"{pool}-b"]

    producer = Producer(bootstrap)
    await producer.start()
    await producer.send(
        events.POLICIES,
        policy(
            ns,
            "web",
            pool,
            priority=1000,
            minReplicas=2,
            metrics=[{"name": "rps", "target": {"type": "AverageValue", "averageValue": 70}}],
        ),
    )
    await producer.send(
        events.POLICIES,
        policy(
            ns,
            "train",
            pool,
            priority=0,
            metrics=[{"name": "work", "target": {"type": "AverageValue", "averageValue": 1}}],
            elastic={
                "floor": 4,
                "restartPenaltySeconds": 1,
                "scalingEfficiency": 0.9,
                "minResizeIntervalSeconds": 8,
            },
        ),
    )
    replicas = {web: 4, job: 12}

    async def publish_state(wl: str) -> None:
        await producer.send(
            events.WORKLOADS,
            events.WorkloadState(
                workload=wl,
                spec_replicas=replicas[wl],
                ready_replicas=replicas[wl],
                observed_at=time.time(),
                requests=REQ,
                pool=pool,
                started_at=time.time() - 7200 if wl == job else None,
            ),
        )

    for wl in ours:
        await publish_state(wl)
    for name in nodes:
        await producer.send(events.CLUSTER, node(name, pool))

    journal_path = tmp_path / "decider.journal"
    decider = governor_service(
        "decider",
        bootstrap,
        {"GROUP_ID": f"dec-{unique_suffix}", "JOURNAL": str(journal_path), "LOG_LEVEL": "INFO"},
        tmp_path / "decider.log",
    )
    decider.start()

    decisions: list[events.ScaleDecision] = []
    shortfalls: list[events.Shortfall] = []
    follow = Consumer(
        bootstrap, [events.DECISIONS, events.SHORTFALLS], group_id=None, check_keys=False
    )
    await follow.start()

    # Kafka delivers at least once: a producer retry can write a record twice (the actuator's seq
    # fence makes that harmless), so what the test saw is de-duplicated by identity.
    seen: set[Any] = set()

    async def cluster() -> None:
        while True:
            for m in await follow.poll(300):
                v = m.value
                if isinstance(v, events.ScaleDecision) and v.workload in ours:
                    if v.decision_id in seen:
                        continue
                    seen.add(v.decision_id)
                    decisions.append(v)
                    replicas[v.workload] = v.to_replicas
                    await publish_state(v.workload)
                elif isinstance(v, events.Shortfall) and v.pool == pool:
                    key = (v.workload, v.wanted, v.granted, v.at, v.reason)
                    if key not in seen:
                        seen.add(key)
                        shortfalls.append(v)

    load = {web: ("rps", 280.0), job: ("work", 16.0)}

    async def windows() -> None:
        while True:
            now = time.time()
            for wl, (metric, value) in load.items():
                await producer.publish(
                    events.LOAD,
                    events.LoadWindow(
                        workload=wl, metric=metric, window="stable", start=now - 10, end=now,
                        count=10, mean=value, max=value, p95=value, newest_sample=now - 0.1,
                    ),
                )  # fmt: skip
            await asyncio.sleep(0.5)

    async def until(what: str, cond: Callable[[], bool], seconds: float = 45.0) -> None:
        deadline = time.monotonic() + seconds
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out waiting for {what}: replicas {replicas}, "
                    f"decisions {[(d.workload, d.to_replicas) for d in decisions]}, "
                    f"shortfalls {[(s.workload, s.wanted, s.granted) for s in shortfalls]}\n"
                    f"{decider.tail()}"
                )
            await asyncio.sleep(0.2)

    def short(wl: str, granted: int, after: float = 0.0) -> bool:
        return any(s.workload == wl and s.granted == granted and s.at >= after for s in shortfalls)

    tasks = [asyncio.create_task(cluster()), asyncio.create_task(windows())]
    try:
        # 1. calm: nothing to change, the job is short of 4 (16 wanted, 12 fit).
        await until("the job's shortfall", lambda: short(job, 12))
        assert replicas == {web: 4, job: 12}
        s = next(s for s in shortfalls if s.workload == job)
        assert (s.wanted, s.granted, s.pool) == (16, 12, pool)
        assert s.resources.get("nvidia.com/gpu", 0) > 0 or s.resources.get("koordinator.sh/rdma")

        # 2. burst: 840 rps -> 12; the job goes to its floor in the same cycle.
        load[web] = ("rps", 840.0)
        await until("the burst", lambda: replicas[web] == 12 and replicas[job] == 4)
        web_up = next(d for d in decisions if d.workload == web and d.to_replicas == 12)
        job_down = next(d for d in decisions if d.workload == job and d.to_replicas == 4)
        assert abs(web_up.decided_at - job_down.decided_at) < 0.5  # one stage-2 cycle
        assert {r.rule for r in job_down.reasons} & {"priority", "device_fit", "capacity"}
        await until("the floor shortfall", lambda: short(job, 4))

        # 3. moderate: the service scales in to 8, the job back to 8 once the interval passed.
        load[web] = ("rps", 560.0)
        await until("the job's grow", lambda: replicas[web] == 8 and replicas[job] == 8)
        grow = next(d for d in decisions if d.workload == job and d.to_replicas == 8)
        assert grow.decided_at - job_down.decided_at >= 8.0  # minResizeIntervalSeconds
        held = [d for d in decisions if d.workload == job and d.decided_at > job_down.decided_at]
        assert [d.to_replicas for d in held] == [8]  # one resize, not one per freed GPU

        # 4. NIC 0 of node a turns unhealthy: 4 VFs fewer; the job loses them, the service not.
        failed_at = time.time()
        await producer.send(events.CLUSTER, node(nodes[0], pool, bad_nics=(0,)))
        await until("the NIC failure's recompute", lambda: replicas[job] == 4)
        cut = next(d for d in decisions if d.workload == job and d.decided_at >= failed_at)
        assert cut.to_replicas == 4
        await until("the failure's shortfall", lambda: short(job, 4, after=failed_at))
        await asyncio.sleep(3)
        assert replicas[web] == 8
        assert not any(d.workload == web and d.decided_at >= failed_at for d in decisions)
        assert not any(s.workload == web for s in shortfalls)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await follow.stop()
        decider.stop()
        for name in ("web", "train"):
            await producer.tombstone(events.POLICIES, f"{ns}/{name}")
        for name in nodes:
            await producer.tombstone(events.CLUSTER, name)
        await producer.stop()

    # Every decision has reasons; seq only grows per workload.
    for wl in ours:
        ds = [d for d in decisions if d.workload == wl]
        assert all(d.reasons for d in ds)
        assert [d.seq for d in ds] == sorted({d.seq for d in ds})
    # Shortfalls are published on change, not every tick.
    keys = [(s.workload, s.wanted, s.granted) for s in shortfalls]
    assert len(keys) <= 2 * len(set(keys)) + 2, keys

    # The journal replays to the same decisions.
    replayed = {
        d.decision_id: d for d in journal.replayed_decisions(journal_path) if d.workload in ours
    }
    for d in decisions:
        assert replayed.get(d.decision_id) == d, d.decision_id
    assert '"level":"ERROR"' not in decider.log_path.read_text(), decider.tail()
