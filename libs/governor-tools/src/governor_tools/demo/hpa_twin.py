"""The HPA twins: beside each governor-managed web service, a twin Deployment under a real
`autoscaling/v2` HorizontalPodAutoscaler (kube-controller-manager's HPA controller, started by
`devcluster.sh up --with-hpa`), so the demo compares governor with HPA live against live.

What the twin shares with its service: the trace segment (the workload simulator offers it the
same load), the simulated pods' start-up and capacity, min/max replicas, the target (7 rps per
pod) and the policy's `behavior`, scaled like every other duration. What it gets instead of
governor: an External metric from governor-metrics-adapter (the per-instant total over its pods,
`governor.dev/statistic: total`, with an `AverageValue` target: what `sum(rate(...))` gives a
stock Prometheus adapter), served with the stock scrape delay (`governor.dev/delay-seconds`: one
HPA sync, 15 trace-s, as the simulator's reference HPA sees it). Its pods run in a pool of their
own (`hpa-pool`), so the two arms never compete for nodes.
"""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path
from typing import Any

from governor.external_metrics import DELAY_LABEL, KIND_LABEL, NAME_LABEL, STATISTIC_LABEL
from governor.inventory import POOL_LABEL
from governor.kube import Kube
from governor_tools.demo import scenario as sc
from governor_tools.sim.policies import HPA_PIPELINE, HPA_SYNC_SECONDS

SUFFIX = "-hpa"
POOL = "hpa-pool"
NODES = 5  # 160 cpu: both twins at their maxReplicas (40 + 30) × 2 cpu fit
APISERVICE = "v1beta1.external.metrics.k8s.io"
SERVICE = "governor-metrics-adapter"
TRACE_SYNC = HPA_SYNC_SECONDS  # the controller's sync period in trace seconds
TRACE_SCRAPE_DELAY = HPA_PIPELINE.delay_seconds  # what a stock adapter's data is behind by


def twin(s: sc.WebService) -> sc.WebService:
    """The twin of a web service: the same service, named `<name>-hpa`."""
    return sc.WebService(
        s.name + SUFFIX, priority=s.priority, min_replicas=s.min_replicas,
        max_replicas=s.max_replicas, base_load=s.base_load, peak_load=s.peak_load,
        cpu=s.cpu, memory_gi=s.memory_gi,
    )  # fmt: skip


TWINS = tuple(twin(s) for s in sc.SERVICES)
WEB = sc.SERVICES + TWINS  # every Deployment the workload simulator runs


def service_of(name: str) -> str:
    """The governor-managed service whose load a Deployment is offered."""
    return name.removesuffix(SUFFIX)


def web(name: str) -> sc.WebService:
    return next(s for s in WEB if s.name == name)


def node_names() -> list[str]:
    return [f"hpa-node-{i}" for i in range(NODES)]


def node_obj(name: str) -> dict[str, Any]:
    capacity = {"cpu": str(sc.NODE_CPU), "memory": f"{sc.NODE_MEMORY_GI}Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {POOL_LABEL: POOL, "kubernetes.io/hostname": name}},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def hpa_obj(s: sc.WebService, ts: sc.TimeScale) -> dict[str, Any]:
    """The twin's HPA: the service's bounds and behavior, an External metric from the adapter."""
    t = twin(s)
    selector = {
        KIND_LABEL: "Deployment",
        NAME_LABEL: t.name,
        "window": "stable",
        STATISTIC_LABEL: "total",
        DELAY_LABEL: f"{ts.wall(TRACE_SCRAPE_DELAY):g}",
    }
    policy = sc.web_policy(s, ts)["spec"]
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": t.name, "namespace": sc.NAMESPACE},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": t.name},
            "minReplicas": t.min_replicas,
            "maxReplicas": t.max_replicas,
            "behavior": policy["behavior"],
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": sc.METRIC, "selector": {"matchLabels": selector}},
                        "target": {
                            "type": "AverageValue",
                            "averageValue": f"{round(sc.TARGET_PER_POD * 1000)}m",
                        },
                    },
                }
            ],
        },
    }


def adapter_env(certs: tuple[Path, Path, Path], port: int) -> dict[str, str]:
    """The adapter's serving settings (the stack adds Kafka, the kubeconfig and /readyz)."""
    _, crt, key = certs
    return {
        "SERVE__HOST": "127.0.0.1",
        "SERVE__PORT": str(port),
        "SERVE__TLS_CERT_FILE": str(crt),
        "SERVE__TLS_KEY_FILE": str(key),
    }


async def register_adapter(kube: Kube, ca: Path, port: int, timeout_s: float = 60.0) -> bool:
    """external.metrics.k8s.io through the aggregation layer to the adapter; True once the
    APIService is Available."""
    bundle = base64.b64encode(await asyncio.to_thread(ca.read_bytes)).decode()
    await kube.apply(
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": SERVICE, "namespace": sc.NAMESPACE},
         "spec": {"type": "ExternalName", "externalName": "localhost",
                  "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}},
        field_manager="governor-demo",
    )  # fmt: skip
    await kube.apply(
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": APISERVICE},
         "spec": {"group": "external.metrics.k8s.io", "version": "v1beta1",
                  "groupPriorityMinimum": 100, "versionPriority": 100,
                  "service": {"namespace": sc.NAMESPACE, "name": SERVICE, "port": port},
                  "caBundle": bundle}},
        field_manager="governor-demo",
    )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        obj = await kube.get("apiregistration.k8s.io/v1", "apiservices", APISERVICE)
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Available" and c.get("status") == "True":
                return True
        await asyncio.sleep(0.5)
    return False


async def install(kube: Kube, ts: sc.TimeScale, replicas: dict[str, int]) -> None:
    """The twins' pool, Deployments (at their services' initial replicas) and HPAs."""
    for name in node_names():
        node = node_obj(name)
        await kube.apply({k: v for k, v in node.items() if k != "status"},
                         field_manager="governor-demo")  # fmt: skip
        await kube.merge_patch("v1", "nodes", name, {"status": node["status"]},
                               subresource="status")  # fmt: skip
    for s in sc.SERVICES:
        t = twin(s)
        await kube.apply(sc.deployment_obj(t, replicas[s.name]), field_manager="governor-demo")
        await kube.apply(hpa_obj(s, ts), field_manager="governor-demo")
