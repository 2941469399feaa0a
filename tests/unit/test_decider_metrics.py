"""The decider's per-workload and per-pool gauges, from the service fed its records without Kafka
(`on_table`, `on_load`, `tick`, their outputs delivered as `run_core` does): what a dashboard
shows is what stage 1 and stage 2 decided."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import REGISTRY

from governor import events
from governor.bus import Message
from governor.ownership import Ownership
from governor.shell import deliver
from governor_decider.main import Decider, DeciderSettings, Step
from tests.support.policies import scaling_policy

GiB = float(2**30)


def _value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def _msg(topic: str, key: str | None, value: Any) -> Message[Any]:
    return Message(topic=topic, partition=0, offset=0, key=key, value=value, timestamp_ms=0)


async def _decider(pool: str, ns: str, now: float) -> tuple[Decider, str, str, list[Message[Any]]]:
    """A decider with a pool's node, two policies and their workloads (its tables), and the
    load windows (not yet handed to it) that make both want to scale up."""
    d = Decider(DeciderSettings())  # no I/O until run()
    cluster, workloads = events.CLUSTER.name, events.WORKLOADS.name
    gpus = [events.Device(type="gpu", minor=i, pcie=str(i), free=100, total=100) for i in (0, 1)]
    nics = [events.Device(type="rdma", minor=0, pcie="0", free=1, total=1)]
    node = events.NodeState(
        node=f"{pool}-n", pool=pool, allocatable={"cpu": 8.0, "memory": 32 * GiB},
        devices=gpus + nics,
    )  # fmt: skip
    await d.on_table(_msg(cluster, node.node, node))
    load: list[Message[Any]] = []
    train, web = f"{ns}/PyTorchJob/train", f"{ns}/Deployment/web"
    for name, kind, extra, requests in (
        ("train", "PyTorchJob", {"elastic": {"floor": 1}}, {"cpu": 1.0, "nvidia.com/gpu": 1.0,
                                                           "koordinator.sh/rdma": 1.0}),
        ("web", "Deployment", {}, {"cpu": 0.5, "memory": GiB}),
    ):  # fmt: skip
        policy = scaling_policy(
            name,
            ns,
            {
                "targetRef": {"kind": kind, "name": name},
                "minReplicas": 1,
                "maxReplicas": 8,
                "pool": pool,
                "metrics": [{"name": "q", "target": {"type": "AverageValue", "averageValue": 10}}],
                **extra,
            },
        )
        await d.on_table(
            _msg(events.POLICIES.name, f"{ns}/{name}", events.PolicyRecord(policy=policy))
        )
        state = events.WorkloadState(
            workload=policy.workload, spec_replicas=1, ready_replicas=1, observed_at=now - 1,
            requests=requests, pool=pool, restarts=4 if name == "train" else 0,
            started_at=now - 3600,
        )  # fmt: skip
        await d.on_table(_msg(workloads, policy.workload, state))
        for kind_ in ("stable", "panic"):
            size = 60.0 if kind_ == "stable" else 6.0
            window = events.LoadWindow(
                workload=policy.workload, metric="q", window=kind_, start=now - size,
                end=now, count=10, mean=80.0, max=80.0, p95=80.0, newest_sample=now - 0.5,
                closed=False,
            )  # fmt: skip
            load.append(_msg(d.load_topic.name, policy.workload, window))
    return d, train, web, load


async def _delivered(d: Decider, out: Step) -> None:
    await deliver(out, d.sink, d.sink)


def _recommendations(d: Decider, published: list[object]) -> list[Message[Any]]:
    """What governor.recommendations would carry back to the decider (its stage 2)."""
    topic = d.recommendations_topic.name
    return [_msg(topic, v.workload, v) for v in published if isinstance(v, events.Recommendation)]


async def test_pool_gauges_follow_the_allocation_and_workload_gauges_the_recommendation() -> None:
    now = time.time()
    pool, ns = "metrics-test-pool", "metrics-test"
    d, train, web, load = await _decider(pool, ns, now)
    published: list[object] = []

    async def send(topic: object, value: object) -> None:
        published.append(value)

    async def send_many(topic: object, values: list[object]) -> list[object]:
        published.extend(values)
        return []

    d.producer.send = send  # type: ignore[method-assign,assignment]
    d.producer.publish = send  # type: ignore[method-assign,assignment]
    d.producer.publish_many = send_many  # type: ignore[method-assign,assignment]
    await _delivered(d, d.on_load(load))  # stage 1 of train and web
    await _delivered(d, d.on_load(_recommendations(d, published)))  # stage 2: the pool, whole

    gpu, rdma = "nvidia.com/gpu", "koordinator.sh/rdma"
    cap = {r: _value("governor_decider_pool_capacity", pool=pool, resource=r) for r in (gpu, rdma)}
    assert cap == {gpu: 2.0, rdma: 1.0}
    assert _value("governor_decider_pool_capacity", pool=pool, resource="cpu") == 8.0
    # train wants more (80 / 10 = 8, damped by the scale-up rate) than the one RDMA VF allows.
    alloc = d.stage2.pools[pool].allocation
    assert alloc is not None
    granted = alloc.grants[train].replicas
    assert granted == 1
    assert _value("governor_decider_pool_allocated", pool=pool, resource=gpu) == granted
    assert _value("governor_decider_pool_allocated", pool=pool, resource=rdma) == granted
    web_granted = alloc.grants[web].replicas
    cpu = _value("governor_decider_pool_allocated", pool=pool, resource="cpu")
    assert cpu == granted * 1.0 + web_granted * 0.5
    wanted = alloc.grants[train].wanted
    assert wanted > granted
    assert _value("governor_decider_shortfall_replicas", workload=train, pool=pool) == wanted - 1
    assert (_value("governor_decider_pool_shortfall", pool=pool, resource=rdma) or 0) > 0
    assert _value("governor_decider_elastic_restarts", workload=train) == 4
    assert _value("governor_decider_elastic_restarts", workload=web) is None  # not elastic
    assert _value("governor_decider_metric_value", workload=train, metric="q") == 80.0
    target = {"workload": train, "metric": "q", "target_type": "AverageValue"}
    assert _value("governor_decider_metric_target", **target) == 10.0
    assert _value("governor_decider_replicas", workload=train, kind="desired") == wanted
    assert _value("governor_decider_replicas", workload=train, kind="max") == 8

    # A deleted policy takes its workload's series with it.
    await d.on_table(_msg(events.POLICIES.name, f"{ns}/train", None))
    assert _value("governor_decider_replicas", workload=train, kind="desired") is None
    assert _value("governor_decider_elastic_restarts", workload=train) is None
    assert _value("governor_decider_metric_value", workload=train, metric="q") is None
    assert _value("governor_decider_replicas", workload=web, kind="desired") is not None


async def test_latency_observes_decisions_on_new_input_not_those_a_tick_made_due() -> None:
    """newest sample -> decision (the <= 1 s target and its alert) measures the pipeline: a
    decision a tick makes due by time carries input already evaluated, up to a sample interval
    old, and is not observed."""

    def observed() -> float:
        return _value("governor_decider_sample_to_decision_seconds_count") or 0.0

    counts: dict[str, float] = {}
    for trigger in ("tick", "load"):
        now = time.time()
        pool = f"latency-{trigger}-pool"
        d, _, _, load = await _decider(pool, f"latency-{trigger}", now)
        decisions: list[events.ScaleDecision] = []

        recs: list[object] = []

        async def send(
            topic: object,
            value: object,
            out: list[events.ScaleDecision] = decisions,
            recs: list[object] = recs,
        ) -> None:
            if isinstance(value, events.ScaleDecision):
                out.append(value)
            recs.append(value)

        async def send_many(topic: object, values: list[object], send: Any = send) -> list[object]:
            for value in values:
                await send(topic, value)
            return []

        d.producer.send = send  # type: ignore[method-assign,assignment]
        d.producer.publish = send  # type: ignore[method-assign,assignment]
        d.producer.publish_many = send_many  # type: ignore[method-assign,assignment]
        before = observed()
        if trigger == "load":
            await _delivered(d, d.on_load(load))
            await _delivered(d, d.on_load(_recommendations(d, recs)))
        else:
            for core in d.cores:  # what a rebalance gives a single instance
                core.assign(Ownership.all())
            for msg in load:  # the windows only: a tick evaluates them
                d.stage1.on_load(msg.value)
            await _delivered(d, d.tick(now))  # stage 1 of both (stage 2's pool: no recs yet)
            for msg in _recommendations(d, recs):
                d.stage2.on_recommendation(msg.value)
            await _delivered(d, d.tick(now))  # stage 2 of the pool
        assert decisions, "both workloads want to scale up: stage 2 decides"
        counts[trigger] = observed() - before
        if trigger == "load":
            assert counts[trigger] == len(decisions)
    assert counts["tick"] == 0
