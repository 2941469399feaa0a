"""Cluster state onto Kafka, against a real kube-apiserver and a real Kafka broker.

Nodes (status patched in, as a kubelet would), Koordinator Device objects, pods bound with
spec.nodeName and device-allocated annotations, a Deployment, a Volcano Job, a PyTorchJob and
their ScalingPolicies go in; the compacted topics must show the right inventory, every single
change must be ONE message for its key, resyncs and restarts must add nothing, and a collector
killed mid-stream (task cancelled, or process SIGKILLed) must converge on restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from prometheus_client import REGISTRY

from governor.bus import records_to_end, topic_partitions
from governor.events import NodeState, PolicyRecord, WorkloadState
from governor.inventory import DEVICE_ALLOCATED, DEVICE_JOINT_ALLOCATE, PRIORITY_FROM_ANNOTATION
from governor.kube import Kube, KubeError
from governor.topics import ensure_topics
from governor_collector.cluster.collector import (
    ClusterCollector,
    ClusterCollectorSettings,
)
from governor_tools.demo.scenario import device_obj
from tests.fixtures.kube import governor_kube
from tests.support.crds import install_crds as install_crd_files
from tests.support.policies import average_metric, scaling_policy_obj
from tests.support.topics import fresh_suffix

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
CRD_FILES = [
    REPO / "deploy/k8s/crds/scalingpolicy.yaml",
    REPO / "deploy/k8s/crds/testing/koordinator-device.yaml",
    REPO / "deploy/k8s/crds/testing/volcano-job.yaml",
    REPO / "deploy/k8s/crds/testing/pytorchjob.yaml",
]
GiB = 2**30
SETTLE_S = 2.0  # > coalescing (0.2 s) + a resync (1 s): long enough for a second message


# --- cluster helpers --------------------------------------------------------------------------


KINDS = {
    "nodes": "Node",
    "pods": "Pod",
    "namespaces": "Namespace",
    "serviceaccounts": "ServiceAccount",
    "deployments": "Deployment",
    "priorityclasses": "PriorityClass",
    "customresourcedefinitions": "CustomResourceDefinition",
    "devices": "Device",
    "jobs": "Job",
    "pytorchjobs": "PyTorchJob",
    "scalingpolicies": "ScalingPolicy",
}


async def create(
    kube: Kube, api_version: str, plural: str, body: dict[str, Any], *, namespace: str | None = None
) -> dict[str, Any]:
    """POST with apiVersion and kind filled in (custom resources require them)."""
    body = {"apiVersion": api_version, "kind": KINDS[plural], **body}
    return await kube.create(api_version, plural, body, namespace=namespace)


async def _create(
    kube: Kube, api_version: str, plural: str, body: dict[str, Any], ns: str | None = None
) -> dict[str, Any]:
    try:
        return await create(kube, api_version, plural, body, namespace=ns)
    except KubeError as e:
        if e.status != 409:
            raise
        return await kube.get(api_version, plural, body["metadata"]["name"], namespace=ns)


async def install_crds(kube: Kube) -> None:
    await install_crd_files(
        kube,
        CRD_FILES,
        [
            ("governor.dev/v1alpha1", "ScalingPolicy"),
            ("scheduling.koordinator.sh/v1alpha1", "Device"),
            ("batch.volcano.sh/v1alpha1", "Job"),
            ("kubeflow.org/v1", "PyTorchJob"),
        ],
    )


def requests(cpu: str, memory: str, **extra: str) -> dict[str, Any]:
    return {
        "requests": {"cpu": cpu, "memory": memory, **extra},
        "limits": {"cpu": cpu, "memory": memory, **extra},
    }


@dataclass
class Env:
    kube: Kube
    suffix: str
    ns: str
    pool: str
    pool2: str
    topics: dict[str, str]
    bootstrap: str
    kubeconfig: str
    created_nodes: list[str] = field(default_factory=list)

    def node(self, i: int) -> str:
        return f"cs-{self.suffix}-n{i}"

    # nodes --------------------------------------------------------------------------------
    async def add_node(self, i: int, *, cpu: str = "32", gpus: int = 4) -> None:
        name = self.node(i)
        await create(
            self.kube,
            "v1",
            "nodes",
            {"metadata": {"name": name, "labels": {"governor.dev/pool": self.pool}}},
        )
        self.created_nodes.append(name)
        resources = {"cpu": cpu, "memory": "128Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        await self.kube.merge_patch(
            "v1",
            "nodes",
            name,
            {
                "status": {
                    "capacity": resources,
                    "allocatable": resources,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                }
            },
            subresource="status",
        )

    async def add_device(self, i: int, *, gpus: int = 2, vfs: int = 2) -> None:
        """The demo's Device layout in small: `gpus` GPUs and one NIC of `vfs` VFs, all on one
        PCIe switch."""
        device = device_obj(self.node(i), gpus=gpus, nics=1, vfs=vfs)
        await create(self.kube, "scheduling.koordinator.sh/v1alpha1", "devices", device)

    # pods ---------------------------------------------------------------------------------
    async def add_web(self, replicas: int, template: dict[str, Any]) -> None:
        """The Deployment `web` (selecting app=web) of `replicas` pods of `template`."""
        await create(
            self.kube,
            "apps/v1",
            "deployments",
            {
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": template,
                },
            },
            namespace=self.ns,
        )

    async def add_pod(
        self,
        name: str,
        node: int,
        labels: dict[str, str],
        cpu: str = "1",
        *,
        allocated: dict[str, Any] | None = None,
        ready: bool = True,
    ) -> None:
        annotations = {DEVICE_ALLOCATED: json.dumps(allocated)} if allocated else {}
        await create(
            self.kube,
            "v1",
            "pods",
            {
                "metadata": {"name": name, "labels": labels, "annotations": annotations},
                "spec": {
                    "nodeName": self.node(node),
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/app:1",
                            "resources": requests(cpu, "1Gi"),
                        }
                    ],
                },
            },
            namespace=self.ns,
        )
        status = "True" if ready else "False"
        await self.kube.merge_patch(
            "v1",
            "pods",
            name,
            {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": status}]}},
            namespace=self.ns,
            subresource="status",
        )

    async def delete_pod(self, name: str) -> None:
        await self.kube.request(
            "DELETE",
            f"/api/v1/namespaces/{self.ns}/pods/{name}",
            query=[("gracePeriodSeconds", "0")],
        )

    # workloads and policies ---------------------------------------------------------------
    def policy(self, name: str, kind: str, api_version: str, **spec: Any) -> dict[str, Any]:
        return scaling_policy_obj(
            self.ns,
            name,
            targetRef={
                "kind": kind,
                "name": name,
                "apiVersion": api_version,
                **spec.pop("ref", {}),
            },
            minReplicas=1,
            maxReplicas=8,
            pool=self.pool,
            metrics=[average_metric(average=100)],
            **spec,
        )


@pytest.fixture(scope="module")
async def kube(kubeconfig_path: Any) -> AsyncIterator[Kube]:
    async with governor_kube(kubeconfig_path) as kube:
        await install_crds(kube)
        yield kube


@pytest.fixture
async def env(kube: Kube, kafka_bootstrap: str, kubeconfig_path: Any) -> AsyncIterator[Env]:
    suffix = fresh_suffix(8)
    e = Env(
        kube=kube,
        suffix=suffix,
        ns=f"cs-{suffix}",
        pool=f"pool-{suffix}",
        pool2=f"pool2-{suffix}",
        topics={
            t: f"test.cluster-state.{t}.{suffix}" for t in ("policies", "workloads", "cluster")
        },
        bootstrap=kafka_bootstrap,
        kubeconfig=str(kubeconfig_path),
    )
    # the topics exist (compacted) before anything reads them: reading would auto-create them
    await ensure_topics(kafka_bootstrap, list(ClusterCollector(settings(e)).topics.values()))
    await create(kube, "v1", "namespaces", {"metadata": {"name": e.ns}})
    # no controller-manager: the ServiceAccount admission plugin would wait for this forever
    await _create(kube, "v1", "serviceaccounts", {"metadata": {"name": "default"}}, ns=e.ns)
    try:
        yield e
    finally:
        for n in e.created_nodes:
            for api_version, plural in (
                ("v1", "nodes"),
                ("scheduling.koordinator.sh/v1alpha1", "devices"),
            ):
                with contextlib.suppress(KubeError):
                    await kube.delete(api_version, plural, n)
        with contextlib.suppress(KubeError):
            await kube.delete("scheduling.k8s.io/v1", "priorityclasses", f"cs-{suffix}-high")
        with contextlib.suppress(KubeError):
            await kube.delete("v1", "namespaces", e.ns)


# --- topic helpers ----------------------------------------------------------------------------


def invalid_policies() -> float:
    """The cluster collector's rejected-policy count (this process's registry)."""
    return REGISTRY.get_sample_value("governor_collector_cluster_invalid_policies_total") or 0.0


@dataclass
class TopicLog:
    """Every record of a topic so far: per-key counts and the table (last value per key)."""

    counts: dict[str, int]
    table: dict[str, bytes]  # tombstoned keys absent


async def read_log(bootstrap: str, topic: str) -> TopicLog:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    await c.start()
    try:
        parts = await topic_partitions(c, topic, bootstrap, None)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        counts: dict[str, int] = {}
        table: dict[str, bytes] = {}
        async for records in records_to_end(c, tps, 120.0, topic):
            for r in records:
                key = r.key.decode()
                counts[key] = counts.get(key, 0) + 1
                if r.value is None:
                    table.pop(key, None)
                else:
                    table[key] = r.value
        return TopicLog(counts, table)
    finally:
        await c.stop()


async def snapshot(e: Env) -> dict[str, TopicLog]:
    return {t: await read_log(e.bootstrap, name) for t, name in e.topics.items()}


def nodes_of(log: TopicLog) -> dict[str, NodeState]:
    return {k: msgspec.json.decode(v, type=NodeState) for k, v in log.table.items()}


def workloads_of(log: TopicLog) -> dict[str, WorkloadState]:
    return {k: msgspec.json.decode(v, type=WorkloadState) for k, v in log.table.items()}


def policies_of(log: TopicLog) -> dict[str, PolicyRecord]:
    return {k: msgspec.json.decode(v, type=PolicyRecord) for k, v in log.table.items()}


async def wait_for(
    e: Env, check: Callable[[dict[str, TopicLog]], bool], what: str, within: float = 30.0
) -> dict[str, TopicLog]:
    deadline = time.monotonic() + within
    last: dict[str, TopicLog] = {}
    while time.monotonic() < deadline:
        try:
            last = await snapshot(e)
            if check(last):
                return last
        except (KeyError, AttributeError, StopIteration, IndexError):
            pass
        except KafkaError:  # a shared broker being bounced by another test: try again
            pass
        await asyncio.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; topics: {summary(e, last)}")


def summary(e: Env, logs: dict[str, TopicLog]) -> str:
    """This test's keys on the topics (for a failure message)."""
    return json.dumps(
        {t: {k: v.decode()[:600] for k, v in mine(e, log.table).items()} for t, log in logs.items()}
    )[:8000]


def mine(e: Env, counts: dict[str, Any]) -> dict[str, Any]:
    """Only this test's keys: the API server is shared with other tests, whose nodes and
    policies the collector publishes too."""
    return {k: v for k, v in counts.items() if k.startswith((f"cs-{e.suffix}-", f"{e.ns}/"))}


# --- the collector ----------------------------------------------------------------------------


def settings(e: Env) -> ClusterCollectorSettings:
    return ClusterCollectorSettings(
        bootstrap=e.bootstrap,
        kubeconfig=e.kubeconfig,
        policies_topic=e.topics["policies"],
        workloads_topic=e.topics["workloads"],
        cluster_topic=e.topics["cluster"],
        coalesce_ms=200,
        resync_seconds=1.0,  # resync often: it must not add messages
        # This run's own Lease, and one identity for its successive instances (never two alive
        # at once): a restart after kill -9 renews at once, as a restarted container of one pod.
        lease_name=f"cs-{e.suffix}",
        lease_namespace=e.ns,
        identity=f"cs-{e.suffix}",
    )


def start_in_process(e: Env) -> asyncio.Task[None]:
    return asyncio.create_task(ClusterCollector(settings(e)).run())


async def stop_task(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def start_process(e: Env, log_path: Path) -> subprocess.Popen[bytes]:
    s = settings(e)
    envvars = {
        **os.environ,
        "GOVERNOR_CLUSTER_COLLECTOR_POLICIES_TOPIC": s.policies_topic,
        "GOVERNOR_CLUSTER_COLLECTOR_WORKLOADS_TOPIC": s.workloads_topic,
        "GOVERNOR_CLUSTER_COLLECTOR_CLUSTER_TOPIC": s.cluster_topic,
        "GOVERNOR_CLUSTER_COLLECTOR_LEASE_NAME": s.lease_name,
        "GOVERNOR_CLUSTER_COLLECTOR_LEASE_NAMESPACE": e.ns,
        "GOVERNOR_CLUSTER_COLLECTOR_IDENTITY": s.identity or "",
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "governor_collector.cluster.cli",
            "--bootstrap",
            s.bootstrap,
            "--kubeconfig",
            e.kubeconfig,
            "--resync-seconds",
            "1",
        ],
        env=envvars,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )


# --- the scenario -----------------------------------------------------------------------------

GPU_ALLOC = {
    "gpu": [
        {
            "minor": 0,
            "resources": {"koordinator.sh/gpu-core": 100, "koordinator.sh/gpu-memory-ratio": 100},
        }
    ],
    "rdma": [
        {
            "minor": 0,
            "resources": {"koordinator.sh/rdma": "1"},
            "extension": {"vfs": [{"minor": 0, "busID": "0000:80:00.1"}]},
        }
    ],
}
JOINT = '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'


async def build_cluster(e: Env) -> None:
    k = e.kube
    await create(
        k,
        "scheduling.k8s.io/v1",
        "priorityclasses",
        {"metadata": {"name": f"cs-{e.suffix}-high"}, "value": 1000},
    )
    for i in (1, 2):
        await e.add_node(i)
        await e.add_device(i)
    template = {
        "metadata": {"labels": {"app": "web"}, "annotations": {DEVICE_JOINT_ALLOCATE: JOINT}},
        "spec": {
            "priorityClassName": f"cs-{e.suffix}-high",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/web:1",
                    "resources": requests(
                        "1", "1Gi", **{"nvidia.com/gpu": "1", "koordinator.sh/rdma": "1"}
                    ),
                }
            ],
        },
    }
    await e.add_web(3, template)
    worker_template = {
        "spec": {
            "containers": [
                {
                    "name": "w",
                    "image": "registry.invalid/train:1",
                    "resources": requests("4", "8Gi"),
                }
            ]
        }
    }
    await create(
        k,
        "batch.volcano.sh/v1alpha1",
        "jobs",
        {
            "metadata": {"name": "train"},
            "spec": {
                "minAvailable": 1,
                "tasks": [
                    {"name": "ps", "replicas": 1, "template": worker_template},
                    {
                        "name": "worker",
                        "replicas": 2,
                        "minAvailable": 1,
                        "template": worker_template,
                    },
                ],
            },
        },
        namespace=e.ns,
    )
    await create(
        k,
        "kubeflow.org/v1",
        "pytorchjobs",
        {
            "metadata": {"name": "bert"},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": worker_template},
                    "Worker": {"replicas": 4, "template": worker_template},
                }
            },
        },
        namespace=e.ns,
    )
    await e.add_pod("web-1", 1, {"app": "web"}, allocated=GPU_ALLOC)
    await e.add_pod("web-2", 2, {"app": "web"}, ready=False)
    await e.add_pod("batch-1", 1, {"app": "batch"}, cpu="2")
    await e.add_pod(
        "train-worker-0",
        2,
        {"volcano.sh/job-name": "train", "volcano.sh/task-spec": "worker"},
        cpu="4",
    )
    await e.add_pod(
        "train-ps-0", 2, {"volcano.sh/job-name": "train", "volcano.sh/task-spec": "ps"}, cpu="4"
    )
    for name, kind, api_version, extra in (
        ("web", "Deployment", "apps/v1", {}),
        ("train", "Job", "batch.volcano.sh/v1alpha1", {"ref": {"task": "worker"}, "priority": 5}),
        ("bert", "PyTorchJob", "kubeflow.org/v1", {"priority": 7}),
    ):
        await create(
            k,
            "governor.dev/v1alpha1",
            "scalingpolicies",
            e.policy(name, kind, api_version, **extra),
            namespace=e.ns,
        )


def initial_state_ok(e: Env) -> Callable[[dict[str, TopicLog]], bool]:
    def check(logs: dict[str, TopicLog]) -> bool:
        nodes = nodes_of(logs["cluster"])
        wls = mine(e, workloads_of(logs["workloads"]))
        pols = mine(e, policies_of(logs["policies"]))
        return (
            {e.node(1), e.node(2)} <= nodes.keys()
            and len(wls) == 3
            and len(pols) == 3
            and nodes[e.node(2)].requested_managed.get("cpu") == 5.0
        )

    return check


async def test_cluster_state_on_kafka(env: Env, tmp_path: Path) -> None:
    e = env
    await build_cluster(e)
    task = start_in_process(e)
    try:
        logs = await wait_for(e, initial_state_ok(e), "the initial inventory", within=60)

        # --- the inventory is right ------------------------------------------------------
        nodes = nodes_of(logs["cluster"])
        n1, n2 = nodes[e.node(1)], nodes[e.node(2)]
        assert n1.pool == e.pool and n1.ready and n1.schedulable
        assert n1.allocatable == {
            "cpu": 32.0,
            "memory": 128 * GiB,
            "nvidia.com/gpu": 4.0,
            "pods": 110.0,
        }
        assert n1.requested_managed == {"cpu": 1.0, "memory": GiB, "pods": 1.0}
        assert n1.requested_unmanaged == {"cpu": 2.0, "memory": GiB, "pods": 1.0}
        gpu0, gpu1, nic = n1.devices
        assert (gpu0.type, gpu0.minor, gpu0.free, gpu0.total, gpu0.pcie, gpu0.numa) == (
            "gpu",
            0,
            0.0,
            100.0,
            "0",
            0,
        )
        assert (gpu1.free, gpu1.healthy) == (100.0, True)
        assert (nic.type, nic.healthy, nic.free, nic.total, nic.pcie) == (
            "rdma",
            True,
            1.0,
            2.0,
            "0",
        )
        # n2: web-2 (managed) + the Volcano worker (managed) ; the ps pod is not scaled: unmanaged
        assert n2.requested_managed["cpu"] == 5.0
        assert n2.requested_unmanaged["cpu"] == 4.0
        assert all(d.free == d.total for d in n2.devices)

        wls = workloads_of(logs["workloads"])
        web = wls[f"{e.ns}/Deployment/web"]
        assert (web.spec_replicas, web.ready_replicas, web.pool, web.selector) == (
            3,
            1,
            e.pool,
            "app=web",
        )
        assert web.requests == {
            "cpu": 1.0,
            "memory": GiB,
            "nvidia.com/gpu": 1.0,
            "koordinator.sh/rdma": 1.0,
        }
        assert web.joint_allocate == {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}
        train = wls[f"{e.ns}/Job/train"]
        assert (train.spec_replicas, train.ready_replicas, train.requests["cpu"]) == (2, 1, 4.0)
        bert = wls[f"{e.ns}/PyTorchJob/bert"]
        assert (bert.spec_replicas, bert.ready_replicas) == (4, 0)

        pols = policies_of(logs["policies"])
        web_policy = pols[f"{e.ns}/web"].policy
        assert web_policy.spec.priority == 1000  # from the template's PriorityClass
        assert (
            web_policy.metadata.annotations[PRIORITY_FROM_ANNOTATION]
            == f"PriorityClass/cs-{e.suffix}-high"
        )
        assert pols[f"{e.ns}/train"].policy.spec.priority == 5

        # --- quiet: resyncs (every second) publish nothing -------------------------------
        await asyncio.sleep(SETTLE_S)
        before = await snapshot(e)
        await asyncio.sleep(SETTLE_S)
        after = await snapshot(e)
        for t in e.topics:
            assert mine(e, after[t].counts) == mine(e, before[t].counts), f"{t} moved"

        async def one_update(
            action: Callable[[], Any],
            topic: str,
            key: str,
            check: Callable[[bytes | None], bool],
            what: str,
        ) -> dict[str, TopicLog]:
            start = await snapshot(e)
            await action()
            await wait_for(e, lambda logs: check(logs[topic].table.get(key)), what)
            await asyncio.sleep(SETTLE_S)
            end = await snapshot(e)
            sent = end[topic].counts.get(key, 0) - start[topic].counts.get(key, 0)
            assert sent == 1, f"{what}: {sent} messages for {key}"
            return end

        # --- a NIC goes unhealthy: one update of its node ---------------------------------
        async def nic_down() -> None:
            await e.kube.json_patch(
                "scheduling.koordinator.sh/v1alpha1",
                "devices",
                e.node(2),
                [{"op": "replace", "path": "/spec/devices/2/health", "value": False}],
            )

        def nic_is_down(v: bytes | None) -> bool:
            return v is not None and not msgspec.json.decode(v, type=NodeState).devices[2].healthy

        end = await one_update(nic_down, "cluster", e.node(2), nic_is_down, "NIC unhealthy")
        assert end["cluster"].counts.get(e.node(1)) == before["cluster"].counts.get(e.node(1))

        # --- a pod is deleted: one update of its node --------------------------------------
        def batch_gone(v: bytes | None) -> bool:
            return (
                v is not None
                and "cpu" not in msgspec.json.decode(v, type=NodeState).requested_unmanaged
            )

        await one_update(
            lambda: e.delete_pod("batch-1"), "cluster", e.node(1), batch_gone, "pod deleted"
        )

        # --- a node moves to another pool: one update ----------------------------------------
        async def relabel() -> None:
            await e.kube.merge_patch(
                "v1", "nodes", e.node(1), {"metadata": {"labels": {"governor.dev/pool": e.pool2}}}
            )

        def in_pool2(v: bytes | None) -> bool:
            return v is not None and msgspec.json.decode(v, type=NodeState).pool == e.pool2

        await one_update(relabel, "cluster", e.node(1), in_pool2, "node relabelled")

        # --- a policy is deleted: one tombstone, its workload tombstoned, pods unmanaged --------
        async def delete_policy() -> None:
            await e.kube.delete("governor.dev/v1alpha1", "scalingpolicies", "web", namespace=e.ns)

        end = await one_update(
            delete_policy, "policies", f"{e.ns}/web", lambda v: v is None, "policy deleted"
        )
        assert f"{e.ns}/Deployment/web" not in end["workloads"].table
        n1 = nodes_of(end["cluster"])[e.node(1)]
        assert "cpu" not in n1.requested_managed and n1.requested_unmanaged["cpu"] == 1.0

        # --- kill mid-stream (cancel), change the cluster meanwhile, restart: converge -------
        counts_before_kill = await snapshot(e)

        async def burst(prefix: str, n: int, node_i: int) -> None:
            for i in range(n):
                await e.add_pod(
                    f"{prefix}-{i}",
                    node_i,
                    {"volcano.sh/job-name": "train", "volcano.sh/task-spec": "worker"},
                    cpu="100m",
                )

        burst_task = asyncio.create_task(burst("burst-a", 10, 2))
        await asyncio.sleep(0.4)
        await stop_task(task)  # mid-burst
        await burst_task
        await e.delete_pod("web-2")
        await e.add_node(3, cpu="16", gpus=0)
        await e.kube.delete("governor.dev/v1alpha1", "scalingpolicies", "train", namespace=e.ns)

        proc = start_process(e, tmp_path / "collector-1.log")
        try:

            def converged_1(logs: dict[str, TopicLog]) -> bool:
                nodes = nodes_of(logs["cluster"])
                n2 = nodes[e.node(2)]
                return (
                    e.node(3) in nodes
                    and f"{e.ns}/train" not in logs["policies"].table
                    and f"{e.ns}/Job/train" not in logs["workloads"].table
                    # no managed pods left on n2: the burst and the worker are unmanaged now
                    and "cpu" not in n2.requested_managed
                    and n2.requested_unmanaged["cpu"] == 4.0 + 4.0 + 10 * 0.1
                )

            logs = await wait_for(
                e, converged_1, "convergence after a cancelled collector", within=60
            )
            n3 = nodes_of(logs["cluster"])[e.node(3)]
            assert (n3.pool, n3.allocatable["cpu"], n3.devices) == (e.pool, 16.0, [])
            # what did not change while it was down was not published again
            bert_key = f"{e.ns}/PyTorchJob/bert"
            assert (
                logs["workloads"].counts[bert_key]
                == counts_before_kill["workloads"].counts[bert_key]
            )

            # --- kill -9 mid-stream, change meanwhile, restart in-process: converge ----------
            burst_task = asyncio.create_task(burst("burst-b", 10, 1))
            await asyncio.sleep(0.4)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        await burst_task
        await e.kube.json_patch(
            "scheduling.koordinator.sh/v1alpha1",
            "devices",
            e.node(2),
            [{"op": "replace", "path": "/spec/devices/2/health", "value": True}],
        )
        await e.kube.delete("v1", "nodes", e.node(3))
        await e.kube.merge_patch("v1", "nodes", e.node(2), {"spec": {"unschedulable": True}})

        task = start_in_process(e)

        def converged_2(logs: dict[str, TopicLog]) -> bool:
            nodes = nodes_of(logs["cluster"])
            n1, n2 = nodes[e.node(1)], nodes[e.node(2)]
            return (
                e.node(3) not in nodes
                and n2.devices[2].healthy
                and not n2.schedulable
                and n1.requested_unmanaged.get("cpu") == 1.0 + 10 * 0.1
            )

        logs = await wait_for(e, converged_2, "convergence after kill -9", within=60)
        assert set(mine(e, policies_of(logs["policies"]))) == {f"{e.ns}/bert"}
        assert set(mine(e, workloads_of(logs["workloads"]))) == {f"{e.ns}/PyTorchJob/bert"}
        # and once converged, it stays quiet
        await asyncio.sleep(SETTLE_S)
        quiet = await snapshot(e)
        await asyncio.sleep(SETTLE_S)
        again = await snapshot(e)
        for t in e.topics:
            assert mine(e, again[t].counts) == mine(e, quiet[t].counts), (
                f"{t} moved while nothing changed"
            )
    finally:
        await stop_task(task)


async def test_invalid_policies_never_reach_the_topic(env: Env) -> None:
    """Invalid policies are stopped by the CRD's validation (the first layer); should one get
    through (an older CRD), governor's own validation drops it (counted, not published)."""
    e = env
    await e.add_web(
        1,
        {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "m", "image": "x"}]},
        },
    )
    good = e.policy("good", "Deployment", "apps/v1")
    invalid: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
        ("dup-metrics", lambda s: s.update(metrics=s["metrics"] * 2)),
        ("min-above-max", lambda s: s.update(minReplicas=9)),
        ("no-metrics", lambda s: s.update(metrics=[])),
        ("zero-without-scale-to-zero", lambda s: s.update(minReplicas=0)),
    ]
    accepted, rejected = [], []
    for name, spoil in invalid:
        bad = e.policy(name, "Deployment", "apps/v1")
        spoil(bad["spec"])
        try:
            await create(e.kube, "governor.dev/v1alpha1", "scalingpolicies", bad, namespace=e.ns)
            accepted.append(name)
        except KubeError as err:
            rejected.append(err.status)
    assert set(rejected) <= {422}, rejected  # Invalid, naming the field
    await create(e.kube, "governor.dev/v1alpha1", "scalingpolicies", good, namespace=e.ns)
    invalid_before = invalid_policies()
    task = start_in_process(e)
    try:
        await wait_for(e, lambda logs: f"{e.ns}/good" in logs["policies"].table, "the good policy")
        await asyncio.sleep(SETTLE_S)
        logs = await snapshot(e)
        assert set(mine(e, logs["policies"].counts)) == {f"{e.ns}/good"}
        assert invalid_policies() - invalid_before == len(accepted)
    finally:
        await stop_task(task)
