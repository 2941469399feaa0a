"""The cluster side's model (no I/O): events in, the messages worth sending out."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec

from governor.cores.cluster import Change, ClusterCore, Report, Watched
from governor.events import NodeState, PolicyRecord, WorkloadState
from governor.inventory import DEVICE_ALLOCATED, DeviceObject, Node, Pod
from tests.support.policies import policy_obj

DEPLOY = ("apps/v1", "Deployment")


def node(name: str, pool: str = "a") -> Node:
    return msgspec.convert(
        {
            "metadata": {"name": name, "labels": {"governor.dev/pool": pool}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
        },
        Node,
    )


def pod(name: str, node_name: str, app: str = "web", **annotations: str) -> Pod:
    return msgspec.convert(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "labels": {"app": app},
                "annotations": annotations,
            },
            "spec": {
                "nodeName": node_name,
                "containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        },
        Pod,
    )


def device(name: str, healthy: bool = True) -> DeviceObject:
    return msgspec.convert(
        {
            "metadata": {"name": name},
            "spec": {
                "devices": [
                    {"type": "gpu", "minor": 0, "health": True, "topology": {"pcieID": "p0"}},
                    {"type": "rdma", "minor": 0, "health": healthy, "topology": {"pcieID": "p0"}},
                ]
            },
        },
        DeviceObject,
    )


def policy(name: str = "web", rv: str = "1", max_replicas: int = 5) -> dict[str, Any]:
    return policy_obj(
        name,
        "ns",
        {
            "targetRef": {"kind": "Deployment", "name": "web"},
            "maxReplicas": max_replicas,
            "pool": "a",
            "metrics": [{"name": "rps", "target": {"type": "Value", "value": 10}}],
        },
        resourceVersion=rv,
    )


DEPLOYMENT = {
    "metadata": {"name": "web", "namespace": "ns"},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "spec": {"containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
        },
    },
}


def populated() -> ClusterCore:
    m = ClusterCore()
    m.devices_served = True
    m.on(Watched("node", "n1", None, node("n1")))
    m.on(Watched("node", "n2", None, node("n2")))
    m.on(Watched("device", "n1", None, device("n1")))
    m.on(Watched("pod", "ns/web-1", None, pod("web-1", "n1")))
    m.on(Watched("pod", "ns/db-1", None, pod("db-1", "n1", app="db")))
    m.on(Watched("pod", "ns/web-2", None, pod("web-2", "n2")))
    m.on(Watched("policy", "ns/web", None, policy()))
    m.set_target_status(DEPLOY, "synced")
    m.on(Watched("target", "ns/web", None, DEPLOYMENT, gvk=DEPLOY))
    return m


def publish(m: ClusterCore, now: float = 1.0) -> list[Change]:
    changes = m.compute(now)
    for ch in changes:
        m.acknowledge(ch)
    return changes


def keys(changes: list[Change]) -> list[tuple[str, str, bool]]:
    return sorted((c.table, c.key, c.value is None) for c in changes)


def test_first_compute_publishes_everything_once() -> None:
    m = populated()
    changes = publish(m)
    assert keys(changes) == [
        ("cluster", "n1", False),
        ("cluster", "n2", False),
        ("policies", "ns/web", False),
        ("workloads", "ns/Deployment/web", False),
    ]
    n1 = next(c.value for c in changes if c.key == "n1")
    assert isinstance(n1, NodeState)
    assert n1.requested_managed == {"cpu": 1.0, "memory": 2**30, "pods": 1.0}
    assert n1.requested_unmanaged == {"cpu": 1.0, "memory": 2**30, "pods": 1.0}
    assert [d.type for d in n1.devices] == ["gpu", "rdma"]
    wl = next(c.value for c in changes if c.table == "workloads")
    assert isinstance(wl, WorkloadState)
    assert (wl.spec_replicas, wl.ready_replicas, wl.selector) == (2, 2, "app=web")
    # nothing changed: nothing to send, however often we recompute
    m.mark_all_dirty()
    assert publish(m, now=2.0) == []


def test_each_change_is_one_message_for_its_key() -> None:
    m = populated()
    publish(m)
    m.on(Watched("device", "n1", device("n1"), device("n1", healthy=False)))
    assert keys(publish(m)) == [("cluster", "n1", False)]
    m.on(Watched("pod", "ns/db-1", m.pods["ns/db-1"], None))
    assert keys(publish(m)) == [("cluster", "n1", False)]
    m.on(Watched("node", "n2", m.nodes["n2"], node("n2", pool="b")))
    changes = publish(m)
    assert keys(changes) == [("cluster", "n2", False)]
    assert isinstance(changes[0].value, NodeState) and changes[0].value.pool == "b"
    # a status write on the policy moves its resourceVersion only
    m.on(Watched("policy", "ns/web", None, policy(rv="2")))
    assert publish(m) == []


def test_pod_readiness_moves_the_workload_and_the_node() -> None:
    m = populated()
    publish(m)
    m.on(Watched("pod", "ns/web-3", None, pod("web-3", "n2")))
    assert keys(publish(m)) == [("cluster", "n2", False), ("workloads", "ns/Deployment/web", False)]


def test_device_allocations_reduce_free() -> None:
    m = populated()
    publish(m)
    alloc = json.dumps({"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-core": "100"}}]})
    m.on(
        Watched(
            "pod", "ns/web-1", m.pods["ns/web-1"], pod("web-1", "n1", **{DEVICE_ALLOCATED: alloc})
        )
    )
    changes = publish(m)
    assert keys(changes) == [("cluster", "n1", False)]
    n1 = changes[0].value
    assert isinstance(n1, NodeState)
    assert n1.devices[0].free == 0.0


def test_deleting_a_policy_tombstones_it_and_its_workload_and_unmanages_pods() -> None:
    m = populated()
    publish(m)
    m.on(Watched("policy", "ns/web", m.policies["ns/web"], None))
    changes = publish(m)
    assert keys(changes) == [
        ("cluster", "n1", False),
        ("cluster", "n2", False),
        ("policies", "ns/web", True),
        ("workloads", "ns/Deployment/web", True),
    ]
    n2 = next(c.value for c in changes if c.key == "n2")
    assert isinstance(n2, NodeState) and n2.requested_managed == {}


def test_deleted_node_is_tombstoned() -> None:
    m = populated()
    publish(m)
    m.on(Watched("node", "n2", m.nodes["n2"], None))
    assert keys(publish(m)) == [("cluster", "n2", True)]


def test_invalid_policy_is_reported_not_published_nor_tombstoned() -> None:
    m = populated()
    publish(m)
    m.take_reports()
    m.on(Watched("policy", "ns/web", None, policy(rv="3", max_replicas=0)))
    assert publish(m) == []
    [report] = m.take_reports()
    assert (report.kind, report.key) == ("invalid_policy", "ns/web") and report.text
    publish(m)  # reported once per resourceVersion
    assert m.take_reports() == []
    m.on(Watched("policy", "ns/bad", None, policy("bad", max_replicas=0)))
    assert publish(m) == []
    assert [r.key for r in m.take_reports()] == ["ns/bad"]


def test_an_unreadable_input_is_reported_once() -> None:
    m = populated()
    publish(m)
    m.take_reports()
    bad = msgspec.structs.replace(m.nodes["n2"], status=msgspec.structs.replace(
        m.nodes["n2"].status, allocatable={"cpu": "lots"}))  # fmt: skip
    m.on(Watched("node", "n2", m.nodes["n2"], bad))
    publish(m)
    reports = m.take_reports()
    assert reports and all(isinstance(r, Report) and r.kind == "problem" for r in reports)
    m.on(Watched("node", "n2", bad, bad))
    publish(m)
    assert m.take_reports() == []  # each text once


def test_unknown_target_kind_keeps_the_last_value() -> None:
    m = populated()
    publish(m)
    m.set_target_status(DEPLOY, "pending")
    m.mark_all_dirty()
    assert publish(m) == []
    m.set_target_status(DEPLOY, "missing")
    assert ("workloads", "ns/Deployment/web", True) in keys(publish(m))


def test_restart_from_the_topics_publishes_only_the_difference() -> None:
    first = populated()
    publish(first)
    tables = copy.deepcopy(first.published)
    # while the collector was down: a pod went away and a policy was deleted
    again = populated()
    again.on(Watched("pod", "ns/db-1", again.pods["ns/db-1"], None))
    again.on(Watched("policy", "ns/web", again.policies["ns/web"], None))
    again.on(Watched("node", "n3", None, node("n3")))
    for table, values in tables.items():
        again.load_published(table, values)
    changes = publish(again, now=99.0)
    assert keys(changes) == [
        ("cluster", "n1", False),
        ("cluster", "n2", False),
        ("cluster", "n3", False),
        ("policies", "ns/web", True),
        ("workloads", "ns/Deployment/web", True),
    ]
    # and a restart with nothing changed publishes nothing
    third = populated()
    for table, values in copy.deepcopy(first.published).items():
        third.load_published(table, values)
    assert publish(third) == []


def test_policy_record_shape() -> None:
    m = populated()
    rec = next(c.value for c in publish(m) if c.table == "policies")
    assert isinstance(rec, PolicyRecord)
    assert rec.policy.key == "ns/web"
    assert rec.published_at == 1.0


def test_pod_events_recompute_only_their_namespace() -> None:
    m = populated()
    publish(m)
    assert not m.policies_dirty
    other = pod("x", "n2")
    other = msgspec.structs.replace(
        other, metadata=msgspec.structs.replace(other.metadata, namespace="elsewhere")
    )
    m.on(Watched("pod", "elsewhere/x", None, other))
    assert m.dirty_namespaces == {"elsewhere"}
    assert keys(publish(m)) == [("cluster", "n2", False)]
    # the same pod in the policy's namespace is managed and moves the workload's readiness
    m.on(Watched("pod", "ns/web-9", None, pod("web-9", "n1")))
    changes = publish(m)
    assert keys(changes) == [("cluster", "n1", False), ("workloads", "ns/Deployment/web", False)]
    wl = next(c.value for c in changes if c.table == "workloads")
    assert isinstance(wl, WorkloadState) and wl.ready_replicas == 3


def test_target_status_write_recomputes_its_namespace_only() -> None:
    m = populated()
    publish(m)
    status = {**DEPLOYMENT, "status": {"observedGeneration": 1, "readyReplicas": 1}}
    m.on(Watched("target", "ns/web", DEPLOYMENT, status, gvk=DEPLOY))
    assert not m.policies_dirty and m.dirty_namespaces == {"ns"}
    changes = publish(m)
    assert keys(changes) == [("workloads", "ns/Deployment/web", False)]
    wl = changes[0].value
    assert isinstance(wl, WorkloadState) and wl.ready_replicas == 1
    # the target goes away: its workload is tombstoned, its pods become unmanaged
    m.on(Watched("target", "ns/web", status, None, gvk=DEPLOY))
    assert keys(publish(m)) == [
        ("cluster", "n1", False),
        ("cluster", "n2", False),
        ("workloads", "ns/Deployment/web", True),
    ]
