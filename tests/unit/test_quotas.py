"""ResourceQuota and Volcano Queue objects to their events (governor.quotas), and the collector's
model publishing them."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from governor.cores.cluster import ClusterCore, Watched
from governor.events import QuotaState
from governor.inventory import Pod, PodTemplate
from governor.quotas import (
    Covered,
    PodGroup,
    Queue,
    ResourceQuota,
    job_queue,
    pod_limits,
    queue_state,
    quota_cost,
    quota_state,
    scope_matches,
)
from tests.support.policies import policy_obj


def spec(cpu: str = "500m", limit: str | None = "1", pc: str = "", **extra: str) -> dict[str, Any]:
    res: dict[str, Any] = {"requests": {"cpu": cpu, **extra}}
    if limit is not None:
        res["limits"] = {"cpu": limit}
    out: dict[str, Any] = {"containers": [{"name": "c", "resources": res}]}
    if pc:
        out["priorityClassName"] = pc
    return out


def template(**kw: Any) -> PodTemplate:
    meta = kw.pop("meta", {})
    return msgspec.convert({"metadata": meta, "spec": spec(**kw)}, PodTemplate)


def pod(name: str, ns: str = "shop", phase: str = "Running", meta: Any = None, **kw: Any) -> Pod:
    return msgspec.convert(
        {
            "metadata": {"name": name, "namespace": ns, **(meta or {})},
            "spec": spec(**kw),
            "status": {"phase": phase},
        },
        Pod,
    )


def quota(hard: dict[str, str], **spec_: Any) -> ResourceQuota:
    return msgspec.convert(
        {
            "metadata": {"name": "q", "namespace": "shop"},
            "spec": {"hard": hard, **spec_},
            "status": {"used": {"requests.cpu": "3500m"}},
        },
        ResourceQuota,
    )


def test_one_pod_costs_what_kubernetes_charges_each_hard_resource() -> None:
    s = template(cpu="500m", limit="2", **{"nvidia.com/gpu": "1"}).spec
    hard = ["cpu", "requests.cpu", "limits.cpu", "pods", "count/pods", "requests.nvidia.com/gpu"]
    assert quota_cost([*hard, "count/services", "requests.storage"], s) == {
        "cpu": 0.5,
        "requests.cpu": 0.5,
        "limits.cpu": 2.0,
        "pods": 1.0,
        "count/pods": 1.0,
        "requests.nvidia.com/gpu": 1.0,
    }
    # A container without a limit is charged its request on limits.*.
    assert pod_limits(template(cpu="250m", limit=None).spec) == {"cpu": 0.25}


@pytest.mark.parametrize(
    ("scopes", "selector", "pc", "best_effort", "expected"),
    [
        ([], None, "", False, True),
        (["PriorityClass"], None, "", False, False),
        (["PriorityClass"], None, "high", False, True),
        ([], [("PriorityClass", "In", ["high"])], "high", False, True),
        ([], [("PriorityClass", "In", ["high"])], "low", False, False),
        ([], [("PriorityClass", "NotIn", ["high"])], "low", False, True),
        ([], [("PriorityClass", "DoesNotExist", [])], "", False, True),
        (["BestEffort"], None, "", False, False),
        (["BestEffort"], None, "", True, True),
        (["NotBestEffort"], None, "", False, True),
        (["NotTerminating", "NotBestEffort"], None, "", False, True),
        (["Terminating"], None, "", False, False),
        (["CrossNamespacePodAffinity"], None, "", False, False),
    ],
)
def test_scopes_select_pods_as_kubernetes_does(
    scopes: list[str],
    selector: list[tuple[str, str, list[str]]] | None,
    pc: str,
    best_effort: bool,
    expected: bool,
) -> None:
    sel = (
        {"matchExpressions": [{"scopeName": n, "operator": o, "values": v} for n, o, v in selector]}
        if selector
        else None
    )
    q = quota({"pods": "10"}, scopes=scopes, **({"scopeSelector": sel} if sel else {}))
    s = msgspec.convert({"containers": [{"name": "c"}]}, Pod).spec if best_effort else None
    if s is None:
        s = template(pc=pc).spec
    elif pc:
        s = msgspec.structs.replace(s, priority_class_name=pc)
    assert scope_matches(q, s) is expected


def test_quota_state_covers_workloads_and_sums_unmanaged_pods() -> None:
    q = quota(
        {"requests.cpu": "40", "count/pods": "20"},
        scopeSelector={
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}
            ]
        },
    )
    workloads = [
        Covered("shop/Deployment/web", "shop", template(cpu="2", pc="high")),
        Covered("shop/Deployment/low", "shop", template(cpu="2", pc="low")),
        # the class comes from the target (a Volcano Job's spec.priorityClassName)
        Covered("shop/Job/train", "shop", template(cpu="4"), priority_class="high"),
        Covered("other/Deployment/web", "other", template(cpu="2", pc="high")),
    ]
    pods = [
        pod("a", cpu="1", pc="high"),
        pod("b", cpu="1", pc="high", phase="Succeeded"),  # holds nothing
        pod("c", cpu="1", pc="low"),  # out of scope
        pod("managed", cpu="2", pc="high", meta={"labels": {"app": "web"}}),
    ]
    state = quota_state(q, workloads, pods, lambda p: p.metadata.labels.get("app") == "web", 5.0)
    assert state.quota == "shop/q" and state.namespace == "shop"
    assert state.hard == {"requests.cpu": 40.0, "count/pods": 20.0}
    assert state.used == {"requests.cpu": 3.5}
    assert state.covers == {
        "shop/Deployment/web": {"requests.cpu": 2.0, "count/pods": 1.0},
        "shop/Job/train": {"requests.cpu": 4.0, "count/pods": 1.0},
    }
    assert state.unmanaged == {"requests.cpu": 1.0, "count/pods": 1.0}
    assert state.scopes == ["PriorityClass"] and state.priority_classes == ["high"]


def test_a_queue_covers_jobs_by_spec_queue_and_pods_by_their_podgroup() -> None:
    q = msgspec.convert(
        {
            "metadata": {"name": "research"},
            "spec": {
                "capability": {"nvidia.com/gpu": 16, "cpu": "64"},
                "deserved": {"nvidia.com/gpu": 8},
                "guarantee": {"resource": {"nvidia.com/gpu": "4"}},
                "weight": 3,
                "reclaimable": False,
                "parent": "root",
            },
            "status": {"state": "Open", "allocated": {"nvidia.com/gpu": "6"}},
        },
        Queue,
    )
    groups = {
        "lab/pg": msgspec.convert(
            {"metadata": {"name": "pg"}, "spec": {"queue": "research"}}, PodGroup
        )
    }
    assert job_queue({"spec": {"queue": "research"}}) == "research"
    assert job_queue({"spec": {}}) == "default"
    workloads = [
        Covered(
            "lab/Job/train", "lab", template(cpu="4", **{"nvidia.com/gpu": "2"}), queue="research"
        ),
        Covered("lab/Job/other", "lab", template(), queue="default"),
        Covered(
            "lab/Deployment/infer",
            "lab",
            template(cpu="1", meta={"annotations": {"scheduling.k8s.io/group-name": "pg"}}),
        ),
        Covered(
            "lab/Deployment/named",
            "lab",
            template(
                cpu="1", meta={"annotations": {"scheduling.volcano.sh/queue-name": "research"}}
            ),
        ),
        Covered("lab/Deployment/none", "lab", template()),
    ]
    pods = [
        pod("x", ns="lab", cpu="3", meta={"annotations": {"scheduling.k8s.io/group-name": "pg"}}),
        pod("y", ns="lab", cpu="3"),
    ]
    state = queue_state(q, workloads, pods, groups, lambda p: False, 1.0)
    assert set(state.covers) == {"lab/Job/train", "lab/Deployment/infer", "lab/Deployment/named"}
    assert state.covers["lab/Job/train"] == {"cpu": 4.0, "nvidia.com/gpu": 2.0}
    assert state.unmanaged == {"cpu": 3.0}
    assert state.capability == {"nvidia.com/gpu": 16.0, "cpu": 64.0}
    assert state.guarantee == {"nvidia.com/gpu": 4.0} and state.deserved == {"nvidia.com/gpu": 8.0}
    assert (state.weight, state.reclaimable, state.parent) == (3, False, "root")
    assert state.allocated == {"nvidia.com/gpu": 6.0}


def _policy(ns: str, name: str) -> dict[str, Any]:
    return policy_obj(
        name,
        ns,
        {
            "targetRef": {"kind": "Deployment", "name": name, "apiVersion": "apps/v1"},
            "minReplicas": 1,
            "maxReplicas": 8,
            "metrics": [{"name": "rps", "target": {"type": "AverageValue", "averageValue": 100}}],
        },
        resourceVersion="1",
    )


def _web_with_target(m: ClusterCore, gvk: tuple[str, str], target: dict[str, Any]) -> None:
    """The policy shop/web, its target kind listed, and its target object."""
    m.on(Watched("policy", "shop/web", None, _policy("shop", "web")))
    m.set_target_status(gvk, "synced")
    m.on(Watched("target", "shop/web", None, target, gvk=gvk))


def test_the_model_publishes_quotas_and_queues_and_tombstones_them() -> None:
    m = ClusterCore()
    gvk = ("apps/v1", "Deployment")
    labels = {"app": "web"}
    _web_with_target(
        m,
        gvk,
        {
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec(cpu="1")},
            },
        },
    )
    m.on(Watched("pod", "shop/w1", None, pod("w1", cpu="1", meta={"labels": labels})))
    m.on(Watched("pod", "shop/x", None, pod("x", cpu="2")))
    m.on(Watched("quota", "shop/q", None, quota({"requests.cpu": "10"})))
    changes = m.compute(1.0)
    first = {(c.table, c.key): c.value for c in changes}
    q = first[("quotas", "shop/q")]
    assert isinstance(q, QuotaState)
    assert q.covers == {"shop/Deployment/web": {"requests.cpu": 1.0}}
    assert q.unmanaged == {"requests.cpu": 2.0}
    for c in changes:
        m.acknowledge(c)
    m.on(Watched("pod", "shop/x2", None, pod("x2", cpu="2", phase="Failed")))
    assert m.compute(1.5) == [], "nothing a quota reads changed: nothing published"
    m.on(Watched("quota", "shop/q", None, None))
    gone = [(c.table, c.key, c.value) for c in m.compute(3.0)]
    assert gone == [("quotas", "shop/q", None)]


def test_cluster_show_lists_quotas_and_queues_with_their_use() -> None:
    from rich.console import Console

    from governor.events import QueueState
    from governor_tools.cli.cluster_limits import render_queues, render_quotas

    console = Console(record=True, width=240)
    render_quotas(
        [
            QuotaState(
                quota="shop/compute-quota",
                namespace="shop",
                hard={"requests.cpu": 40.0, "requests.memory": 64 * 2**30},
                used={"requests.cpu": 38.0, "requests.memory": 8 * 2**30},
                unmanaged={"requests.cpu": 14.0},
                covers={"shop/Deployment/web": {"requests.cpu": 4.0}},
                scopes=["PriorityClass"],
                priority_classes=["high"],
            )
        ],
        console,
    )
    render_queues(
        [
            QueueState(
                queue="research",
                capability={"nvidia.com/gpu": 16.0},
                allocated={"nvidia.com/gpu": 16.0},
                guarantee={"nvidia.com/gpu": 4.0},
                reclaimable=False,
                parent="root",
                covers={"lab/Job/train": {"nvidia.com/gpu": 1.0}},
            )
        ],
        console,
    )
    text = console.export_text()
    assert "shop/compute-quota" in text and "PriorityClass [high]" in text
    assert "requests.cpu 38/40" in text and "requests.memory 8Gi/64Gi" in text
    assert "shop/Deployment/web" in text
    assert "research" in text and "nvidia.com/gpu 16/16" in text and "root" in text
    assert "lab/Job/train" in text


def test_a_quota_with_a_bad_quantity_keeps_its_last_value_and_the_others_go_on() -> None:
    m = ClusterCore()
    m.on(Watched("quota", "shop/q", None, quota({"requests.cpu": "10"})))
    m.on(
        Watched(
            "quota",
            "shop/other",
            None,
            msgspec.structs.replace(
                quota({"pods": "5"}),
                metadata=msgspec.convert(
                    {"name": "other", "namespace": "shop"}, ResourceQuota
                ).metadata,
            ),
        )
    )
    for c in m.compute(1.0):
        m.acknowledge(c)
    assert set(m.published["quotas"]) == {"shop/q", "shop/other"}
    m.on(Watched("quota", "shop/q", None, quota({"requests.cpu": "ten"})))
    m.on(Watched("quota", "shop/other", None, None))
    changes = m.compute(2.0)
    assert [(c.table, c.key, c.value) for c in changes] == [("quotas", "shop/other", None)]


def test_a_priority_class_scope_sees_the_global_default_class() -> None:
    from governor.inventory import PriorityClass

    m = ClusterCore()
    gvk = ("apps/v1", "Deployment")
    _web_with_target(
        m,
        gvk,
        {
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 1, "template": {"spec": spec(cpu="1")}},
        },
    )
    scoped = {
        "scopeSelector": {
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["standard"]}
            ]
        }
    }
    m.on(Watched("quota", "shop/q", None, quota({"requests.cpu": "10"}, **scoped)))

    def covers() -> dict[str, Any]:
        out = {c.key: c.value for c in m.compute(1.0) if c.table == "quotas"}
        for c in m.compute(1.0):
            m.acknowledge(c)
        q = out.get("shop/q") or m.published["quotas"]["shop/q"]
        assert isinstance(q, QuotaState)
        return q.covers

    assert covers() == {}
    m.on(
        Watched(
            "priority_class",
            "standard",
            None,
            msgspec.convert(
                {"metadata": {"name": "standard"}, "value": 100, "globalDefault": True},
                PriorityClass,
            ),
        )
    )
    assert covers() == {"shop/Deployment/web": {"requests.cpu": 1.0}}
