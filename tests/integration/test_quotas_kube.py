"""ResourceQuotas and Volcano Queues on the real kube-apiserver: read, respected, admitted.

The objects are created in the real API server, listed back, decoded and turned into events by
the cluster collector's own model (`ClusterCore`), and stage 2 (`rebalance.plan`) allocates
under them; what it grants is then created as pods, which the API server's ResourceQuota
admission judges. ScalingPolicies are handed to the model as objects (their CRD path is the
cluster-state test's subject); everything else is what the server returned.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from governor.cores.cluster import ClusterCore, Watched
from governor.events import NodeState, QueueState, QuotaState, Recommendation, WorkloadState
from governor.inventory import Node, Pod
from governor.kube import Kube, KubeError
from governor.policy.quotas import constraints
from governor.policy.rebalance import Member, PoolPlan, plan
from governor.quotas import PodGroup, Queue, ResourceQuota
from tests.fixtures.kube import governor_kube
from tests.support.crds import install_crds
from tests.support.policies import average_metric, scaling_policy_obj
from tests.support.topics import fresh_suffix

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CRDS = [
    REPO / "deploy/k8s/crds/scalingpolicy.yaml",
    REPO / "deploy/k8s/crds/testing/volcano-job.yaml",
    REPO / "deploy/k8s/crds/testing/volcano-queue.yaml",
]
VOLCANO_JOB = ("batch.volcano.sh/v1alpha1", "Job")
DEPLOYMENT = ("apps/v1", "Deployment")
SCHED = "scheduling.volcano.sh/v1beta1"


@pytest.fixture(scope="module")
async def kube(kubeconfig_path: Any) -> AsyncIterator[Kube]:
    async with governor_kube(kubeconfig_path) as kube:
        await install(kube)
        yield kube


async def install(kube: Kube) -> None:
    """The ScalingPolicy CRD and the Volcano Job, Queue and PodGroup CRDs (test fixtures)."""
    await install_crds(
        kube,
        CRDS,
        [
            (SCHED, "Queue"),
            (SCHED, "PodGroup"),
            VOLCANO_JOB,
            ("governor.dev/v1alpha1", "ScalingPolicy"),
        ],
    )


@pytest.fixture
async def ns(kube: Kube) -> str:
    name = f"q-{fresh_suffix(8)}"
    await kube.create(
        "v1", "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


def container(cpu: str, limit: str | None = None) -> dict[str, Any]:
    return {
        "name": "main",
        "image": "registry.invalid/app:1",
        "resources": {
            "requests": {"cpu": cpu, "memory": "64Mi"},
            "limits": {"cpu": limit or cpu, "memory": "64Mi"},
        },
    }


def pod(
    name: str, labels: dict[str, str], cpu: str, limit: str | None = None, **meta: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, **meta},
        "spec": {"containers": [container(cpu, limit)]},
    }


def policy(
    ns: str, name: str, kind: str, api_version: str, pool: str, **spec: Any
) -> dict[str, Any]:
    return scaling_policy_obj(
        ns,
        name,
        metadata={"resourceVersion": "1", "generation": 1},
        targetRef={"kind": kind, "name": name, "apiVersion": api_version, **spec.pop("ref", {})},
        minReplicas=1,
        maxReplicas=50,
        pool=pool,
        metrics=[average_metric(average=100)],
        **spec,
    )


async def add_node(kube: Kube, name: str, pool: str, cpu: str = "64") -> None:
    await kube.create(
        "v1",
        "nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"governor.dev/pool": pool}},
        },
    )
    await kube.merge_patch(
        "v1",
        "nodes",
        name,
        {
            "status": {
                "allocatable": {"cpu": cpu, "memory": "256Gi", "pods": "110"},
                "capacity": {"cpu": cpu, "memory": "256Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        },
        subresource="status",
    )


async def add_quota(kube: Kube, ns: str, name: str, hard: dict[str, str]) -> None:
    await kube.create(
        "v1",
        "resourcequotas",
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": name},
            "spec": {"hard": hard},
        },
        namespace=ns,
    )


async def add_queue(kube: Kube, name: str, spec: dict[str, Any]) -> None:
    """A Volcano Queue (cluster-scoped)."""
    await kube.create(
        SCHED,
        "queues",
        {"apiVersion": SCHED, "kind": "Queue", "metadata": {"name": name}, "spec": spec},
    )


async def add_deployment(
    kube: Kube,
    ns: str,
    replicas: int,
    web: dict[str, Any],
    annotations: dict[str, str] | None = None,
) -> dict[str, str]:
    """Deployment `web` (no controller here: no ReplicaSets, no pods); its pods' labels."""
    labels = {"app": "web"}
    meta: dict[str, Any] = {"labels": labels}
    if annotations:
        meta["annotations"] = annotations
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": meta, "spec": {"containers": [web]}},
        },
    }
    await kube.create("apps/v1", "deployments", body, namespace=ns)
    return labels


class Cluster:
    """The collector's model over what the API server lists, for one namespace and pool."""

    def __init__(self, kube: Kube, ns: str, pool: str) -> None:
        self.kube, self.ns, self.pool = kube, ns, pool
        self.model = ClusterCore()
        self.policies: dict[str, dict[str, Any]] = {}

    async def read(self, targets: list[tuple[str, str, str]]) -> dict[str, dict[str, Any]]:
        m, k = self.model, self.kube
        for obj in await k.list_objects("v1", "nodes"):
            n = msgspec.convert(obj, Node)
            if n.metadata.labels.get("governor.dev/pool") == self.pool:
                m.on(Watched("node", n.metadata.name, None, n))
        for obj in await k.list_objects("v1", "pods", namespace=self.ns):
            p = msgspec.convert(obj, Pod)
            m.on(Watched("pod", f"{self.ns}/{p.metadata.name}", None, p))
        for obj in await k.list_objects("v1", "resourcequotas", namespace=self.ns):
            q = msgspec.convert(obj, ResourceQuota)
            m.on(Watched("quota", f"{self.ns}/{q.metadata.name}", None, q))
        for obj in await k.list_objects(SCHED, "queues"):
            queue = msgspec.convert(obj, Queue)
            m.on(Watched("queue", queue.metadata.name, None, queue))
        for obj in await k.list_objects(SCHED, "podgroups", namespace=self.ns):
            pg = msgspec.convert(obj, PodGroup)
            m.on(Watched("podgroup", f"{self.ns}/{pg.metadata.name}", None, pg))
        for api_version, plural, kind in targets:
            gvk = (api_version, kind)
            for obj in await k.list_objects(api_version, plural, namespace=self.ns):
                m.on(Watched("target", f"{self.ns}/{obj['metadata']['name']}", None, obj, gvk=gvk))
            m.set_target_status(gvk, "synced")
        for key, obj in self.policies.items():
            m.on(Watched("policy", key, None, obj))
        out: dict[str, dict[str, Any]] = {
            "quotas": {},
            "queues": {},
            "workloads": {},
            "cluster": {},
        }
        for ch in m.compute(1000.0):
            if ch.value is not None and ch.table in out:
                out[ch.table][ch.key] = ch.value
                m.acknowledge(ch)
        return out

    def plan(self, state: dict[str, dict[str, Any]], desired: dict[str, int]) -> PoolPlan:
        nodes: list[NodeState] = [n for n in state["cluster"].values() if n.pool == self.pool]
        workloads: dict[str, WorkloadState] = state["workloads"]
        members = [
            Member(
                rec=Recommendation(
                    workload=w,
                    pool=self.pool,
                    desired=want,
                    current=workloads[w].spec_replicas,
                    ready=workloads[w].ready_replicas,
                    min_replicas=1,
                    max_replicas=50,
                    floor=1,
                    priority=0,
                    weight=1.0,
                    requests=workloads[w].requests,
                    elastic=False,
                    reasons=[],
                    inputs=[],
                    newest_input=999.0,
                    policy_generation=1,
                    computed_at=1000.0,
                ),
                current=workloads[w].spec_replicas,
            )
            for w, want in desired.items()
        ]
        quotas: list[QuotaState] = list(state["quotas"].values())
        queues: list[QueueState] = [q for q in state["queues"].values() if q.covers]
        limits = constraints(
            quotas, queues, desired, {w: s.spec_replicas for w, s in workloads.items()}
        )
        return plan(members, nodes, pool=self.pool, now=1000.0, constraints=limits)


async def test_a_quota_caps_the_scale_up_at_what_admission_admits(kube: Kube, ns: str) -> None:
    """A Deployment wants 10 replicas of 1 cpu (limit 2); its namespace's quota allows
    requests.cpu 6, limits.cpu 20, count/pods 10, and an unmanaged pod holds 1 cpu of it.

    No kube-controller-manager runs here, so no quota controller: the quota's `status.hard` is
    written the way that controller writes it on its first sync (= spec.hard, used 0), which is
    what admission needs to judge pods; from then on the API server's ResourceQuota admission
    itself adds each admitted pod to `status.used`."""
    pool = f"pool-{ns}"
    await add_node(kube, f"node-{ns}", pool)
    hard = {"requests.cpu": "6", "limits.cpu": "20", "count/pods": "10"}
    await add_quota(kube, ns, "compute-quota", hard)
    await kube.merge_patch(
        "v1",
        "resourcequotas",
        "compute-quota",
        {
            "status": {
                "hard": hard,
                "used": {"requests.cpu": "0", "limits.cpu": "0", "count/pods": "0"},
            }
        },
        namespace=ns,
        subresource="status",
    )
    await kube.create("v1", "pods", pod("batch", {"app": "batch"}, "1"), namespace=ns)
    labels = await add_deployment(kube, ns, 2, container("1", "2"))
    c = Cluster(kube, ns, pool)
    c.policies[f"{ns}/web"] = policy(ns, "web", "Deployment", "apps/v1", pool)
    state = await c.read([("apps/v1", "deployments", "Deployment")])
    web = f"{ns}/Deployment/web"
    quota = state["quotas"][f"{ns}/compute-quota"]
    assert quota.covers == {web: {"requests.cpu": 1.0, "limits.cpu": 2.0, "count/pods": 1.0}}
    assert quota.unmanaged == {"requests.cpu": 1.0, "limits.cpu": 1.0, "count/pods": 1.0}
    assert quota.used["requests.cpu"] == 1.0  # admission counted the unmanaged pod

    p = c.plan(state, {web: 10})
    target = p.targets[web]
    assert target.replicas == 5, target.reasons
    why = [r for r in target.reasons if r.limit]
    assert why and why[0].limit == f"quota:{ns}/compute-quota"
    assert why[0].detail.startswith(f"quota: {ns}/compute-quota requests.cpu 6/6 -> 5")
    assert p.shortfalls and p.shortfalls[0].limit == f"quota:{ns}/compute-quota"

    # The capped count is admitted by the real quota admission, one more is refused.
    for i in range(target.replicas):
        await kube.create("v1", "pods", pod(f"web-{i}", labels, "1", "2"), namespace=ns)
    with pytest.raises(KubeError) as refused:
        await kube.create("v1", "pods", pod("web-extra", labels, "1", "2"), namespace=ns)
    assert refused.value.status == 403 and "exceeded quota" in str(refused.value)
    assert "requests.cpu" in str(refused.value)
    # HPA-like scaling (no quota awareness) would ask for 10: half of them fail creation.
    used = (await kube.get("v1", "resourcequotas", "compute-quota", namespace=ns))["status"]["used"]
    assert used["requests.cpu"] == "6" and used["count/pods"] == "6"


async def test_a_job_stops_at_its_queue_capability_while_another_queue_has_room(
    kube: Kube, ns: str
) -> None:
    """Two teams' queues: the training job (a Volcano Job, spec.queue) may take 4 cpu in queue
    `research`; the service (a Deployment whose pods join a PodGroup of queue `prod`) has room
    in its queue and in the pool, and gets all it asks."""
    pool = f"pool-{ns}"
    await add_node(kube, f"node-{ns}", pool, cpu="64")
    research, prod = f"research-{ns}", f"prod-{ns}"
    for name, spec in [
        (research, {"capability": {"cpu": "4"}, "weight": 1}),
        (prod, {"capability": {"cpu": "40"}, "guarantee": {"resource": {"cpu": "2"}}, "weight": 2}),
    ]:
        await add_queue(kube, name, spec)
    await kube.create(
        SCHED,
        "podgroups",
        {
            "apiVersion": SCHED,
            "kind": "PodGroup",
            "metadata": {"name": "web-pg"},
            "spec": {"queue": prod, "minMember": 1},
        },
        namespace=ns,
    )
    await kube.create(
        "batch.volcano.sh/v1alpha1",
        "jobs",
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "train"},
            "spec": {
                "queue": research,
                "minAvailable": 1,
                "tasks": [
                    {
                        "name": "worker",
                        "replicas": 2,
                        "template": {"spec": {"containers": [container("1")]}},
                    }
                ],
            },
        },
        namespace=ns,
    )
    await add_deployment(kube, ns, 2, container("1"), {"scheduling.k8s.io/group-name": "web-pg"})
    c = Cluster(kube, ns, pool)
    c.policies[f"{ns}/train"] = policy(
        ns, "train", "Job", "batch.volcano.sh/v1alpha1", pool, ref={"task": "worker"}
    )
    c.policies[f"{ns}/web"] = policy(ns, "web", "Deployment", "apps/v1", pool)
    state = await c.read(
        [("apps/v1", "deployments", "Deployment"), ("batch.volcano.sh/v1alpha1", "jobs", "Job")]
    )
    train, web = f"{ns}/Job/train", f"{ns}/Deployment/web"
    assert set(state["workloads"]) >= {train, web}, state["workloads"].keys()
    assert state["queues"][research].covers == {train: {"cpu": 1.0, "memory": 64 * 2**20}}
    assert state["queues"][prod].covers == {web: {"cpu": 1.0, "memory": 64 * 2**20}}
    assert state["queues"][prod].guarantee == {"cpu": 2.0} and state["queues"][prod].weight == 2
    assert state["queues"][research].reclaimable  # the CRD's default, as Volcano's webhook

    p = c.plan(state, {train: 10, web: 12})
    assert p.targets[web].replicas == 12
    assert p.targets[train].replicas == 4
    why = [r for r in p.targets[train].reasons if r.limit]
    assert why and why[0].detail.startswith(f"queue: {research} capability cpu 4/4 -> 4")
    free = sum(n.allocatable["cpu"] for n in state["cluster"].values()) - 16
    assert free > 0, "the pool still has room: the queue, not the pool, stopped the job"


async def test_the_collector_publishes_quotas_and_queues_and_the_decider_respects_them(
    kube: Kube, ns: str, kafka_bootstrap: str, kubeconfig_path: Any
) -> None:
    """The cluster-side collector, on the real API server and a real broker, publishes the
    quota and the queue on their compacted topics; a decider core fed from those topics caps
    the scale-up and names the quota in the decision's reasons and in the shortfall."""
    import asyncio
    import contextlib
    import time

    from governor.bus import read_table
    from governor.cores.decider import DeciderCore
    from governor.events import LoadWindow
    from governor.spec import policy_from_obj
    from governor.topics import ensure_topics
    from governor_collector.cluster.collector import ClusterCollector, ClusterCollectorSettings

    suffix = ns
    pool = f"pool-{ns}"
    await add_node(kube, f"node-{ns}", pool)
    await add_quota(kube, ns, "cpu", {"requests.cpu": "4", "count/pods": "20"})
    queue = f"team-{ns}"
    await add_queue(kube, queue, {"capability": {"cpu": "3"}, "reclaimable": False})
    # HPA's default scale-up rate allows 8 from 4 replicas
    await add_deployment(
        kube, ns, 4, container("500m"), {"scheduling.volcano.sh/queue-name": queue}
    )
    body = policy(ns, "web", "Deployment", "apps/v1", pool)
    del body["metadata"]["resourceVersion"], body["metadata"]["generation"]
    await kube.create("governor.dev/v1alpha1", "scalingpolicies", body, namespace=ns)

    names = {
        t: f"test.quotas.{t}.{suffix}"
        for t in ("policies", "workloads", "cluster", "quotas", "queues")
    }
    s = ClusterCollectorSettings(
        bootstrap=kafka_bootstrap,
        kubeconfig=str(kubeconfig_path),
        policies_topic=names["policies"],
        workloads_topic=names["workloads"],
        cluster_topic=names["cluster"],
        quotas_topic=names["quotas"],
        queues_topic=names["queues"],
        coalesce_ms=100,
        lease_name=f"quotas-{suffix}",  # this run's own Lease: it leads at once
        lease_namespace=ns,
    )
    collector = ClusterCollector(s)
    await ensure_topics(kafka_bootstrap, list(collector.topics.values()))
    task = asyncio.create_task(collector.run())
    web = f"{ns}/Deployment/web"
    try:
        deadline = time.monotonic() + 60
        while True:
            quotas = await read_table(kafka_bootstrap, collector.topics["quotas"])
            queues = await read_table(kafka_bootstrap, collector.topics["queues"])
            workloads = await read_table(kafka_bootstrap, collector.topics["workloads"])
            q, qu = quotas.get(f"{ns}/cpu"), queues.get(queue)
            if (
                q is not None
                and qu is not None
                and web in q.covers
                and web in qu.covers
                and web in workloads
            ):
                break
            assert time.monotonic() < deadline, (
                f"not published: {quotas} {queues} {workloads.keys()}"
            )
            await asyncio.sleep(0.3)
        nodes = await read_table(kafka_bootstrap, collector.topics["cluster"])
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert isinstance(q, QuotaState) and isinstance(qu, QueueState)
    assert q.hard == {"requests.cpu": 4.0, "count/pods": 20.0}
    assert q.covers[web] == {"requests.cpu": 0.5, "count/pods": 1.0}
    assert qu.capability == {"cpu": 3.0} and not qu.reclaimable
    assert qu.covers[web]["cpu"] == 0.5

    core = DeciderCore()
    p = policy_from_obj(body)
    core.on_policy(p.key, p)
    core.on_workload(workloads[web])
    for n in nodes.values():
        if n.pool == pool:
            core.on_node(n)
    for key, value in quotas.items():
        core.on_quota(key, value)
    for key, value in queues.items():
        core.on_queue(key, value)
    now = time.time()
    core.on_window(
        LoadWindow(
            workload=web, metric="rps", window="stable", start=now - 60, end=now, count=60,
            mean=2000.0, max=2000.0, p95=2000.0, newest_sample=now - 0.5,
        )
    )  # fmt: skip
    core.decide(web, now)
    out = core.decide_pool(pool, now)
    assert [d.to_replicas for d in out.decisions] == [6], out.note  # queue: 3 cpu / 0.5
    why = [r for r in out.decisions[0].reasons if r.limit]
    assert why and why[0].limit == f"queue:{queue}"
    assert why[0].detail.startswith(f"queue: {queue} capability cpu 3/3 -> 6")
    assert [(sf.granted, sf.wanted, sf.limit) for sf in out.shortfalls] == [
        (6, 8, f"queue:{queue}")  # wanted: 8 after the rate limit
    ]
