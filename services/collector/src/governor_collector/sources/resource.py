"""`resource`: pod CPU or memory usage from the Kubernetes metrics API (metrics-server).

Each poll lists `metrics.k8s.io/v1beta1` PodMetrics in the workload's namespace for a label
selector (the spec's `selector`, else the target's own selector read from its `scale`
subresource — Deployment and StatefulSet; other kinds must set `selector`).

What is published: **raw usage, the mean per pod** — cores for cpu (unit `cores`), bytes for
memory (unit `bytes`), summed over each pod's containers, averaged over the pods that have
metrics; labels `pods` (how many pods had metrics) and `total` (the sum). The collector does not
divide by requests: the per-replica requests are in `governor.workloads` (WorkloadState.requests,
from the pod template), where the decider has them, so a `Utilization` target is
mean usage / request × 100 there (HPA's Σusage×100/Σrequests, the same number when all pods share
one template) and an `AverageValue` target compares the mean directly.

No pod with metrics -> `no_pods` (no sample: zero pods is not zero usage); API errors -> `kube`;
the metrics API not installed -> `metrics_api_missing`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import aiohttp
import msgspec

from governor.events import MetricSample
from governor.inventory import parse_quantity
from governor.spec import ResourceSource as ResourceSpec
from governor_collector.sources.base import PullSource, SourceError, register

REQUEST_TIMEOUT_S = 10.0

# --- pure conversion ----------------------------------------------------------------------------


class ContainerMetrics(msgspec.Struct):
    name: str
    usage: dict[str, str]


class PodMetricsMeta(msgspec.Struct):
    name: str
    namespace: str = ""


class PodMetrics(msgspec.Struct):
    metadata: PodMetricsMeta
    timestamp: dt.datetime
    containers: list[ContainerMetrics] = msgspec.field(default_factory=list)
    window: str = ""


class PodMetricsList(msgspec.Struct):
    items: list[PodMetrics] = msgspec.field(default_factory=list)


class Usage(msgspec.Struct, frozen=True):
    mean: float  # per pod, base units
    total: float
    pods: int
    timestamp: float  # newest PodMetrics timestamp, epoch seconds


def usage_from_pod_metrics(obj: Any, resource: str) -> Usage:
    """Mean per-pod usage of `resource` ("cpu" or "memory") from a decoded PodMetricsList."""
    try:
        pods = msgspec.convert(obj, PodMetricsList)
    except msgspec.ValidationError as e:
        raise SourceError("bad_response", f"not a PodMetricsList: {e}") from None
    per_pod: list[float] = []
    newest = 0.0
    for pod in pods.items:
        try:
            total = sum(parse_quantity(c.usage[resource]) for c in pod.containers)
        except KeyError:
            continue  # a pod without this resource's usage is a pod without metrics
        except ValueError as e:
            raise SourceError("bad_response", f"pod {pod.metadata.name}: {e}") from None
        if not pod.containers:
            continue
        per_pod.append(total)
        newest = max(newest, pod.timestamp.timestamp())
    if not per_pod:
        raise SourceError("no_pods", "no pod of the selector has metrics")
    total = sum(per_pod)
    return Usage(total / len(per_pod), total, len(per_pod), newest)


UNITS = {"cpu": "cores", "memory": "bytes"}

# --- I/O ------------------------------------------------------------------------------------------


@register
class ResourceSource(PullSource[ResourceSpec]):
    name = "resource"
    config_type = ResourceSpec

    async def _selector(self, api: Any) -> str:
        if self.config.selector:
            return self.config.selector
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        ref, ns = self.target.target_ref, self.target.namespace
        apps = client.AppsV1Api(api)
        try:
            if ref.kind == "Deployment":
                scale = await apps.read_namespaced_deployment_scale(ref.name, ns)
            elif ref.kind == "StatefulSet":
                scale = await apps.read_namespaced_stateful_set_scale(ref.name, ns)
            else:
                raise SourceError(
                    "no_selector", f"a {ref.kind} target needs spec.metrics[].source.selector"
                )
        except ApiException as e:
            if e.status == 404:
                raise SourceError("target_not_found", f"{ref.kind} {ns}/{ref.name}") from None
            raise
        selector = getattr(scale.status, "selector", None)
        if not selector:
            raise SourceError("no_selector", f"{ref.kind} {ns}/{ref.name} reports no selector")
        return str(selector)

    async def collect(self, now: float) -> list[MetricSample]:
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        api = await self.ctx.kube()
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                selector = await self._selector(api)
                obj = await client.CustomObjectsApi(api).list_namespaced_custom_object(
                    "metrics.k8s.io",
                    "v1beta1",
                    self.target.namespace,
                    "pods",
                    label_selector=selector,
                )
        except TimeoutError:
            raise SourceError("timeout", "the metrics API did not answer") from None
        except ApiException as e:
            if e.status == 404:
                raise SourceError(
                    "metrics_api_missing", "metrics.k8s.io/v1beta1 is not served (metrics-server?)"
                ) from None
            raise SourceError("kube", f"HTTP {e.status}: {e.reason}") from None
        except (aiohttp.ClientError, OSError) as e:
            raise SourceError("kube", f"{type(e).__name__}: {e}") from None
        usage = usage_from_pod_metrics(obj, self.config.resource)
        return [
            self.sample(
                usage.mean,
                usage.timestamp or now,
                unit=UNITS[self.config.resource],
                labels={"pods": str(usage.pods), "total": repr(usage.total)},
            )
        ]
