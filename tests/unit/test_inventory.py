"""governor.inventory: Kubernetes objects → PolicyRecord, WorkloadState, NodeState (pure)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.events import Device, NodeState, PolicyRecord, WorkloadState
from governor.inventory import (
    DEVICE_ALLOCATED,
    DEVICE_JOINT_ALLOCATE,
    PRIORITY_FROM_ANNOTATION,
    DeviceObject,
    InventoryError,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    Pod,
    PodSpec,
    PodTemplate,
    PriorityClass,
    content,
    managed_matcher,
    node_state,
    parse_device_allocated,
    parse_joint_allocate,
    parse_quantity,
    parse_selector_string,
    pod_requests,
    policy_from_cluster,
    policy_record,
    selector_matches,
    selector_string,
    summarize_pool,
    workload_state,
    worth_publishing,
)
from governor.spec import PolicyError
from governor.targets import target_kind, target_view

GiB = 2**30

# --- quantities -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", 0.5),
        ("2", 2.0),
        ("2Gi", 2 * GiB),
        ("512Mi", 512 * 2**20),
        ("1.5Ki", 1536.0),
        ("1k", 1000.0),
        ("1M", 1e6),
        ("1G", 1e9),
        ("1E", 1e18),
        ("1e3", 1000.0),
        ("1E3", 1000.0),
        ("1.5e-3", 0.0015),
        ("100n", 1e-7),
        ("250u", 0.00025),
        (".5", 0.5),
        ("+2", 2.0),
        ("-1", -1.0),
        (100, 100.0),
        (0.25, 0.25),
    ],
)
def test_parse_quantity(text: str | float, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize(
    "bad", ["", " ", "abc", "Gi", "1.2.3", "1 Gi", "NaN", "Infinity", "-", "1x"]
)
def test_parse_quantity_rejects(bad: str) -> None:
    with pytest.raises(InventoryError):
        parse_quantity(bad)


@given(st.integers(min_value=0, max_value=10**6))
def test_milli_quantities_round_trip(n: int) -> None:
    assert parse_quantity(f"{n}m") == pytest.approx(n / 1000)


# --- pods -------------------------------------------------------------------------------------


def pod(
    name: str,
    *,
    ns: str = "ns",
    node: str = "n1",
    cpu: str = "1",
    memory: str = "1Gi",
    extra: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    ready: bool = True,
) -> Pod:
    requests = {"cpu": cpu, "memory": memory, **(extra or {})}
    return msgspec.convert(
        {
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": labels or {},
                "annotations": annotations or {},
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "resources": {"requests": requests}}],
            },
            "status": {
                "phase": phase,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        },
        Pod,
    )


def test_pod_requests_sums_containers_and_falls_back_to_limits() -> None:
    spec = msgspec.convert(
        {
            "containers": [
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "2"}}},
            ],
            "overhead": {"cpu": "100m"},
        },
        PodSpec,
    )
    assert pod_requests(spec) == pytest.approx({"cpu": 1.6, "memory": GiB, "nvidia.com/gpu": 2.0})


def test_pod_requests_init_containers_and_sidecars() -> None:
    spec = msgspec.convert(
        {
            "containers": [{"resources": {"requests": {"cpu": "1"}}}],
            "initContainers": [
                {"resources": {"requests": {"cpu": "200m"}}, "restartPolicy": "Always"},
                {"resources": {"requests": {"cpu": "3"}}},
            ],
        },
        PodSpec,
    )
    # max(app 1 + sidecar 0.2, init 3 + sidecar 0.2 started before it)
    assert pod_requests(spec) == pytest.approx({"cpu": 3.2})


# --- device annotations -----------------------------------------------------------------------

ALLOCATED = {
    "gpu": [
        {
            "minor": 0,
            "resources": {"koordinator.sh/gpu-core": 100, "koordinator.sh/gpu-memory-ratio": 100},
        },
        {"minor": 1, "resources": {"koordinator.sh/gpu-core": "50"}},
    ],
    "rdma": [
        {
            "minor": 0,
            "resources": {"koordinator.sh/rdma": "1"},
            "extension": {"vfs": [{"minor": 3, "busID": "0000:08:00.3"}]},
        }
    ],
}


def test_parse_device_allocated() -> None:
    got = parse_device_allocated(json.dumps(ALLOCATED))
    assert [a.minor for a in got["gpu"]] == [0, 1]
    assert got["rdma"][0].extension is not None
    assert got["rdma"][0].extension.vfs[0].bus_id == "0000:08:00.3"


@pytest.mark.parametrize(
    "bad", ["not json", '{"gpu": {"minor": 0}}', '{"gpu": [{"minor": "zero"}]}', "[]"]
)
def test_parse_device_allocated_rejects(bad: str) -> None:
    with pytest.raises(InventoryError, match="device-allocated"):
        parse_device_allocated(bad)


def test_parse_joint_allocate() -> None:
    text = '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
    assert parse_joint_allocate(text) == {
        "deviceTypes": ["gpu", "rdma"],
        "requiredScope": "SamePCIe",
    }
    assert parse_joint_allocate('{"deviceTypes":["gpu","rdma"]}') == {
        "deviceTypes": ["gpu", "rdma"]
    }
    with pytest.raises(InventoryError):
        parse_joint_allocate('{"deviceTypes":"gpu"}')


# --- nodes and devices ------------------------------------------------------------------------


def node(
    name: str = "n1", *, pool: str | None = "gpu", unschedulable: bool = False, **alloc: str
) -> Node:
    labels = {"governor.dev/pool": pool} if pool else {}
    allocatable = alloc or {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return msgspec.convert(
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": unschedulable},
            "status": {
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
        Node,
    )


def device_obj(name: str = "n1", *, nic_healthy: bool = True, vfs: int = 0) -> DeviceObject:
    def gpu(minor: int, pcie: str, numa: int) -> dict[str, Any]:
        return {
            "type": "gpu",
            "minor": minor,
            "health": True,
            "resources": {
                "koordinator.sh/gpu-core": "100",
                "koordinator.sh/gpu-memory-ratio": "100",
            },
            "topology": {
                "socketID": 0,
                "nodeID": numa,
                "pcieID": pcie,
                "busID": f"0000:0{minor}:00.0",
            },
        }

    nic: dict[str, Any] = {
        "type": "rdma",
        "minor": 0,
        "health": nic_healthy,
        "resources": {"koordinator.sh/rdma": "100"},
        "topology": {"socketID": 0, "nodeID": 0, "pcieID": "pci0"},
    }
    if vfs:
        nic["vfGroups"] = [{"vfs": [{"minor": i, "busID": f"0000:08:00.{i}"} for i in range(vfs)]}]
    return msgspec.convert(
        {
            "metadata": {"name": name},
            "spec": {"devices": [gpu(0, "pci0", 0), gpu(1, "pci0", 0), gpu(2, "pci1", 1), nic]},
        },
        DeviceObject,
    )


def test_node_state_splits_managed_and_unmanaged_and_skips_finished_pods() -> None:
    pods = [
        pod("web-1", labels={"app": "web"}, cpu="2"),
        pod("batch", cpu="4", memory="2Gi"),
        pod("done", cpu="8", phase="Succeeded"),
        pod("other-ns-web", ns="other", labels={"app": "web"}, cpu="1"),
    ]
    managed = managed_matcher([("ns", LabelSelector(match_labels={"app": "web"}))])
    state, problems = node_state(node(), pods, None, managed, now=5.0)
    assert problems == []
    assert state.node == "n1"
    assert state.pool == "gpu"
    assert state.allocatable == {
        "cpu": 32.0,
        "memory": 128 * GiB,
        "nvidia.com/gpu": 4.0,
        "pods": 110.0,
    }
    assert state.requested_managed == {"cpu": 2.0, "memory": GiB, "pods": 1.0}
    assert state.requested_unmanaged == {"cpu": 5.0, "memory": 3 * GiB, "pods": 2.0}
    assert state.ready and state.schedulable
    assert state.observed_at == 5.0


def test_node_pool_defaults_and_unschedulable() -> None:
    state, _ = node_state(node(pool=None, unschedulable=True), [], None, lambda p: False)
    assert state.pool == "default"
    assert not state.schedulable


def test_node_devices_minus_allocations() -> None:
    pods = [
        pod("trainer", annotations={DEVICE_ALLOCATED: json.dumps(ALLOCATED)}),
        # a finished pod's allocation is released
        pod("old", phase="Failed", annotations={DEVICE_ALLOCATED: json.dumps(ALLOCATED)}),
    ]
    state, problems = node_state(node(), pods, device_obj(vfs=4), lambda p: False)
    assert problems == []
    assert state.devices == [
        Device(
            type="gpu", minor=0, healthy=True, socket=0, numa=0, pcie="pci0", free=0.0, total=100.0
        ),
        Device(
            type="gpu", minor=1, healthy=True, socket=0, numa=0, pcie="pci0", free=50.0, total=100.0
        ),
        Device(
            type="gpu",
            minor=2,
            healthy=True,
            socket=0,
            numa=1,
            pcie="pci1",
            free=100.0,
            total=100.0,
        ),
        Device(
            type="rdma", minor=0, healthy=True, socket=0, numa=0, pcie="pci0", free=3.0, total=4.0
        ),
    ]


def test_nic_without_vfs_and_unhealthy() -> None:
    whole = {"rdma": [{"minor": 0, "resources": {"koordinator.sh/rdma": "100"}}]}
    pods = [pod("p", annotations={DEVICE_ALLOCATED: json.dumps(whole)})]
    state, _ = node_state(node(), pods, device_obj(nic_healthy=False), lambda p: False)
    nic = next(d for d in state.devices if d.type == "rdma")
    assert (nic.healthy, nic.total, nic.free) == (False, 1.0, 0.0)


def test_bad_annotation_is_a_problem_not_a_failure() -> None:
    pods = [pod("p", annotations={DEVICE_ALLOCATED: "{broken"}), pod("q", cpu="lots")]
    state, problems = node_state(node(), pods, device_obj(), lambda p: False)
    assert len(problems) == 2
    assert any("ns/q" in p for p in problems)
    assert all(d.free == d.total for d in state.devices)


# --- selectors --------------------------------------------------------------------------------


def test_selectors() -> None:
    sel = LabelSelector(
        match_labels={"app": "web"},
        match_expressions=[
            LabelSelectorRequirement("tier", "In", ["a", "b"]),
            LabelSelectorRequirement("canary", "DoesNotExist"),
        ],
    )
    assert selector_matches(sel, {"app": "web", "tier": "a"})
    assert not selector_matches(sel, {"app": "web", "tier": "c"})
    assert not selector_matches(sel, {"app": "web", "tier": "a", "canary": "1"})
    text = selector_string(sel)
    assert text == "app=web,tier in (a,b),!canary"
    assert parse_selector_string(text) == sel
    assert selector_matches(LabelSelector(), {"anything": "x"})


# --- targets and workloads --------------------------------------------------------------------


def policy_obj(
    kind: str = "Deployment",
    api_version: str = "apps/v1",
    *,
    task: str | None = None,
    priority: int | None = None,
    pool: str = "gpu",
) -> dict[str, Any]:
    ref: dict[str, Any] = {"kind": kind, "name": "web", "apiVersion": api_version}
    if task:
        ref["task"] = task
    spec: dict[str, Any] = {
        "targetRef": ref,
        "minReplicas": 1,
        "maxReplicas": 10,
        "pool": pool,
        "metrics": [{"name": "rps", "target": {"type": "AverageValue", "averageValue": 100}}],
    }
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "governor.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {
            "name": "web",
            "namespace": "ns",
            "generation": 2,
            "resourceVersion": "123",
            "uid": "u",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": spec,
        "status": {"lastDecision": "x"},
    }


TEMPLATE = {
    "metadata": {
        "labels": {"app": "web"},
        "annotations": {
            DEVICE_JOINT_ALLOCATE: '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}'
        },
    },
    "spec": {
        "priorityClassName": "high",
        "containers": [
            {
                "name": "main",
                "resources": {
                    "requests": {
                        "cpu": "4",
                        "memory": "16Gi",
                        "nvidia.com/gpu": "1",
                        "koordinator.sh/gpu-core": "100",
                        "koordinator.sh/gpu-memory-ratio": "100",
                        "koordinator.sh/rdma": "1",
                    }
                },
            }
        ],
    },
}


def deployment(*, status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE},
    }
    if status is not None:
        obj["status"] = status
    return obj


def test_target_kinds() -> None:
    assert target_kind("apps/v1", "Deployment") == "apps"
    assert target_kind("apps/v1", "StatefulSet") == "apps"
    assert target_kind("kubeflow.org/v1", "PyTorchJob") == "pytorchjob"
    assert target_kind("batch.volcano.sh/v1alpha1", "Job") == "volcano"
    assert target_kind("batch/v1", "Job") == "generic"


def test_deployment_workload_from_status() -> None:
    p = policy_from_cluster(policy_obj())
    view = target_view(p, deployment(status={"observedGeneration": 1, "readyReplicas": 2}))
    state, problems = workload_state(p, view, [], now=7.0)
    assert problems == []
    assert state == WorkloadState(
        workload="ns/Deployment/web",
        spec_replicas=3,
        ready_replicas=2,
        observed_at=7.0,
        requests={
            "cpu": 4.0,
            "koordinator.sh/gpu-core": 100.0,
            "koordinator.sh/gpu-memory-ratio": 100.0,
            "koordinator.sh/rdma": 1.0,
            "memory": 16 * GiB,
            "nvidia.com/gpu": 1.0,
        },
        selector="app=web",
        pool="gpu",
        joint_allocate={"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"},
    )


def test_deployment_status_zero_ready_is_omitted_by_the_api() -> None:
    p = policy_from_cluster(policy_obj())
    view = target_view(p, deployment(status={"observedGeneration": 1, "replicas": 3}))
    assert view.status_ready == 0


def test_ready_from_pods_when_no_status() -> None:
    p = policy_from_cluster(policy_obj())
    view = target_view(p, deployment())
    pods = [
        pod("a", labels={"app": "web"}),
        pod("b", labels={"app": "web"}, ready=False),
        pod("c", labels={"app": "db"}),
        pod("d", labels={"app": "web"}, ns="other"),
    ]
    state, _ = workload_state(p, view, pods)
    assert state.ready_replicas == 1


def test_pytorchjob_worker() -> None:
    p = policy_from_cluster(policy_obj("PyTorchJob", "kubeflow.org/v1"))
    job = {
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": []}}},
                "Worker": {"replicas": 4, "template": TEMPLATE},
            }
        }
    }
    view = target_view(p, job)
    assert view.spec_replicas == 4
    assert view.status_ready is None
    workers = [
        pod(
            f"w{i}",
            labels={
                "training.kubeflow.org/job-name": "web",
                "training.kubeflow.org/replica-type": "worker",
            },
        )
        for i in range(3)
    ]
    master = pod(
        "m",
        labels={
            "training.kubeflow.org/job-name": "web",
            "training.kubeflow.org/replica-type": "master",
        },
    )
    state, _ = workload_state(p, view, [*workers, master])
    assert state.ready_replicas == 3
    job["status"] = {
        "replicaStatuses": {
            "Worker": {"active": 2, "selector": "training.kubeflow.org/job-name=web"}
        },
        "startTime": "2026-01-01T00:00:00Z",
    }
    view = target_view(p, job)
    assert view.status_ready == 2
    assert view.started_at == 1767225600.0


def test_volcano_job_task() -> None:
    p = policy_from_cluster(policy_obj("Job", "batch.volcano.sh/v1alpha1", task="worker"))
    job: dict[str, Any] = {
        "spec": {
            "minAvailable": 2,
            "priorityClassName": "batch-high",
            "tasks": [
                {"name": "ps", "replicas": 1, "template": {"spec": {"containers": []}}},
                {"name": "worker", "replicas": 5, "template": TEMPLATE},
            ],
        }
    }
    view = target_view(p, job)
    assert (view.spec_replicas, view.status_ready, view.priority_class) == (5, None, "batch-high")
    assert view.selector == LabelSelector(
        match_labels={"volcano.sh/job-name": "web", "volcano.sh/task-spec": "worker"}
    )
    job["status"] = {
        "state": {"phase": "Running"},
        "taskStatusCount": {"worker": {"phase": {"Running": 4}}},
        "retryCount": 1,
    }
    view = target_view(p, job)
    assert (view.status_ready, view.restarts) == (4, 1)
    p2 = policy_from_cluster(policy_obj("Job", "batch.volcano.sh/v1alpha1", task="nope"))
    with pytest.raises(InventoryError, match="no task"):
        target_view(p2, job)


def test_generic_scalable_crd() -> None:
    obj = policy_obj("Inference", "serving.example.com/v1")
    obj["spec"]["targetRef"]["specReplicasPath"] = ".spec.replicas"
    p = policy_from_cluster(obj)
    view = target_view(
        p,
        {
            "spec": {"replicas": 2, "template": TEMPLATE},
            "status": {"selector": "app=web", "readyReplicas": 1},
        },
    )
    assert (view.spec_replicas, view.status_ready) == (2, 1)
    assert view.selector == LabelSelector(match_labels={"app": "web"})
    with pytest.raises(InventoryError):
        target_view(p, {"spec": {}})


# --- policies and priorities ------------------------------------------------------------------


def classes() -> dict[str, PriorityClass]:
    def pc(name: str, value: int, default: bool = False) -> PriorityClass:
        obj = {"metadata": {"name": name}, "value": value, "globalDefault": default}
        return msgspec.convert(obj, PriorityClass)

    return {"high": pc("high", 1000), "low": pc("low", 10, default=True)}


def test_policy_record_drops_resource_version() -> None:
    rec = policy_record(policy_obj(priority=3), None, {}, now=1.0)
    assert isinstance(rec, PolicyRecord)
    assert rec.policy.metadata.resource_version is None
    assert rec.policy.metadata.generation == 2
    assert rec.policy.spec.priority == 3
    # a status write moves the resourceVersion only: no change
    other = policy_obj(priority=3)
    other["metadata"]["resourceVersion"] = "999"
    assert not worth_publishing(rec, policy_record(other, None, {}, now=2.0))


def test_priority_from_priority_class() -> None:
    p = policy_from_cluster(policy_obj())
    view = target_view(p, deployment())
    rec = policy_record(policy_obj(), view, classes())
    assert rec.policy.spec.priority == 1000
    assert rec.policy.metadata.annotations[PRIORITY_FROM_ANNOTATION] == "PriorityClass/high"
    # an explicit priority wins
    assert policy_record(policy_obj(priority=0), view, classes()).policy.spec.priority == 0
    # no class on the template: the globalDefault class
    bare = deployment()
    bare["spec"]["template"] = {"spec": {"containers": []}}
    rec = policy_record(policy_obj(), target_view(p, bare), classes())
    assert rec.policy.spec.priority == 10
    # a class that does not exist: unchanged
    missing = deployment()
    missing["spec"]["template"] = {"spec": {"priorityClassName": "gone", "containers": []}}
    assert policy_record(policy_obj(), target_view(p, missing), classes()).policy.spec.priority == 0


def test_invalid_policy_raises() -> None:
    bad = policy_obj()
    bad["spec"]["maxReplicas"] = 0
    with pytest.raises(PolicyError, match="maxReplicas"):
        policy_record(bad, None, {})


# --- change detection -------------------------------------------------------------------------


def test_worth_publishing_ignores_timestamps() -> None:
    a = NodeState(node="n", pool="p", allocatable={"cpu": 1.0}, observed_at=1.0)
    b = NodeState(node="n", pool="p", allocatable={"cpu": 1.0}, observed_at=2.0)
    c = NodeState(node="n", pool="q", allocatable={"cpu": 1.0}, observed_at=2.0)
    assert content(a) == content(b)
    assert not worth_publishing(a, b)
    assert worth_publishing(a, c)
    assert worth_publishing(None, a)
    assert worth_publishing(a, None)
    assert not worth_publishing(None, None)


def test_node_state_is_order_independent() -> None:
    pods = [pod(f"p{i}", cpu=f"{100 + i}m") for i in range(30)]
    a, _ = node_state(node(), pods, None, lambda p: False)
    b, _ = node_state(node(), list(reversed(pods)), None, lambda p: False)
    assert not worth_publishing(a, b)


# --- summary ----------------------------------------------------------------------------------


def test_summarize_pool() -> None:
    trainer = pod("t", annotations={DEVICE_ALLOCATED: json.dumps(ALLOCATED)}, labels={"app": "web"})
    managed = managed_matcher([("ns", LabelSelector(match_labels={"app": "web"}))])
    n1, _ = node_state(node("n1"), [trainer], device_obj("n1", vfs=2), managed)
    n2, _ = node_state(
        node("n2"), [pod("x", node="n2")], device_obj("n2", nic_healthy=False), managed
    )
    n3, _ = node_state(node("n3", pool="cpu"), [], None, managed)
    summary = summarize_pool([n1, n2, n3], "gpu")
    assert [r.node for r in summary.nodes] == ["n1", "n2"]
    r1, r2 = summary.nodes
    assert (r1.gpus, r1.gpus_healthy, r1.gpus_free, r1.gpu_core_free) == (3, 3, 1, 150.0)
    assert (r1.nics, r1.nics_healthy, r1.nics_free) == (1, 1, 1)
    assert (r2.nics, r2.nics_healthy, r2.nics_free) == (1, 0, 0)
    t = summary.totals
    assert (t.gpus, t.gpus_free, t.nics_healthy) == (6, 4, 1)
    assert t.allocatable["cpu"] == 64.0
    assert t.free["cpu"] == 64.0 - 2.0
    assert summarize_pool([n1, n2, n3]).totals.allocatable["cpu"] == 96.0


def test_template_reads_priority_class() -> None:
    assert msgspec.convert(TEMPLATE, PodTemplate).spec.priority_class_name == "high"
