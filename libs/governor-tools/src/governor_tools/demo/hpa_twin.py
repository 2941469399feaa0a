"""The HPA twins: beside each governor-managed web service, a twin Deployment under a real
`autoscaling/v2` HorizontalPodAutoscaler (kube-controller-manager's HPA controller, started by
`devcluster.sh up --with-hpa`), so the demo compares governor with HPA live against live.

What the twin shares with its service: the trace segment (the workload simulator offers it the
same load), the simulated pods' start-up and capacity, min/max replicas, the target (7 rps per
pod) and the policy's `behavior`, scaled like every other duration. What it gets instead of
governor: an External metric from governor-metrics-adapter (the per-instant total over its pods,
`governor.dev/statistic: total`, with an `AverageValue` target: what `sum(rate(...))` gives a
stock Prometheus adapter), served with the stock scrape delay (`governor.dev/delay-seconds`: one
HPA sync, 15 trace-s). Its pods run in a pool of their own (`hpa-pool`), so the two arms never
compete for nodes.

The arms differ only in the controller: governor's policy scales on the same one metric with the
same target (scenario.web_policy), so governor's panic mode and fresher windows are what the
comparison measures. The simulated twin (`run_sim`, summary.json's `hpa_sim`) is this very HPA
object converted back (`governor import`) and replayed in trace time with the controller's sync
period and what the adapter serves it (`SIM_PIPELINE`): "HPA live vs HPA simulated" checks the
simulator's model of the real controller on the demo's own run.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec

from governor.cores.decider import Evaluate
from governor.external_metrics import (
    DELAY_LABEL,
    GROUP_VERSION,
    KIND_LABEL,
    NAME_LABEL,
    STATISTIC_LABEL,
)
from governor.importer import convert
from governor.kube import Kube
from governor.spec import MetricSpec, ScalingPolicySpec
from governor_tools import aggregation
from governor_tools.demo import scenario as sc
from governor_tools.sim.policies import HPA_PIPELINE, HPA_SYNC_SECONDS
from governor_tools.sim.replay import METRIC, Pipeline, Run, SimConfig, replay
from governor_tools.sim.traces import Trace

SUFFIX = "-hpa"
POOL = "hpa-pool"
NODES = 5  # 160 cpu: both twins at their maxReplicas (40 + 30) × 2 cpu fit
SERVICE = "governor-metrics-adapter"
APISERVICE = "v1beta1.external.metrics.k8s.io"
TRACE_SYNC = HPA_SYNC_SECONDS  # the controller's sync period in trace seconds
TRACE_SCRAPE_DELAY = HPA_PIPELINE.delay_seconds  # what a stock adapter's data is behind by
# What the twin's HPA reads, in trace time: the aggregator's stable window (the selector's
# `window: stable`), one scrape delay old.
SIM_PIPELINE = Pipeline(stable_seconds=sc.TRACE_STABLE_WINDOW, delay_seconds=TRACE_SCRAPE_DELAY)


def twin(s: sc.WebService) -> sc.WebService:
    """The twin of a web service: the same service, named `<name>-hpa`."""
    return msgspec.structs.replace(s, name=s.name + SUFFIX)


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
    return sc.node_obj(name, pool=POOL, gpus=0)


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


def adapter_certs(folder: Path) -> tuple[Path, Path, Path]:
    return aggregation.local_serving_pair(folder, SERVICE, sc.NAMESPACE)


async def register_adapter(kube: Kube, ca: Path, port: int, timeout_s: float = 60.0) -> bool:
    """external.metrics.k8s.io through the aggregation layer to the adapter; True once the
    APIService is Available."""
    bundle = await asyncio.to_thread(ca.read_bytes)
    name = await aggregation.register(
        kube, GROUP_VERSION, namespace=sc.NAMESPACE, service=SERVICE, port=port,
        ca_bundle=bundle, field_manager="governor-demo",
    )  # fmt: skip
    return await aggregation.wait_available(kube, name, timeout_s)


def sim_policy(s: sc.WebService) -> ScalingPolicySpec:
    """The twin's HPA object itself, in trace time, as the simulator's reference HPA: converted
    by `governor import` (bounds, behavior, target), its metric the simulator's total load."""
    spec = convert(hpa_obj(s, sc.TimeScale(1.0))).policy.spec
    (metric,) = spec.metrics
    return msgspec.structs.replace(spec, metrics=[MetricSpec(name=METRIC, target=metric.target)])


def run_sim(s: sc.WebService, trace: Trace, config: SimConfig, evaluate: Evaluate) -> Run:
    """The simulated twin: its HPA's spec, metric pipeline and sync period, the same start-up."""
    return replay("hpa", trace, sim_policy(s), config, evaluate=evaluate,
                  pipeline=SIM_PIPELINE, step_seconds=TRACE_SYNC)  # fmt: skip


async def install(kube: Kube, ts: sc.TimeScale, replicas: dict[str, int]) -> None:
    """The twins' Deployments (at their services' initial replicas) and HPAs (their pool's
    nodes come with the demo's others)."""
    for s in sc.SERVICES:
        deployment = sc.deployment_obj(twin(s), replicas[s.name])
        await kube.apply(deployment, field_manager="governor-demo")
        await kube.apply(hpa_obj(s, ts), field_manager="governor-demo")
