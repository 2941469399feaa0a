"""`kubernetes_workload`: KEDA's kubernetes-workload scaler — how many pods match a selector.

Lists the pods of the policy's namespace with `podSelector` (equality- and set-based label
selector syntax, passed to the API server as it is) and counts those not Succeeded or Failed, as
KEDA does. With an AverageValue target `value`, the policy asks for ceil(pods / value) replicas.

Errors: `kube` (API errors, no client configuration), `timeout`.
"""

from __future__ import annotations

import asyncio

import aiohttp

from governor.events import MetricSample
from governor.spec import KubernetesWorkloadSource as WorkloadSpec
from governor_collector.sources.base import PullSource, SourceError, register
from governor_collector.sources.resource import (
    REQUEST_TIMEOUT_S,
)

TERMINATED = ("Succeeded", "Failed")


def running_pods(phases: list[str | None]) -> int:
    """KEDA's count: pods that have not terminated."""
    return sum(1 for p in phases if p not in TERMINATED)


@register
class KubernetesWorkloadSource(PullSource[WorkloadSpec]):
    name = "kubernetes_workload"
    config_type = WorkloadSpec

    async def collect(self, now: float) -> list[MetricSample]:
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        api = await self.ctx.kube()
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                pods = await client.CoreV1Api(api).list_namespaced_pod(
                    self.target.namespace, label_selector=self.config.pod_selector
                )
        except TimeoutError:
            raise SourceError("timeout", "the API server did not answer") from None
        except ApiException as e:
            raise SourceError("kube", f"HTTP {e.status}: {e.reason}") from None
        except (aiohttp.ClientError, OSError) as e:
            raise SourceError("kube", f"{type(e).__name__}: {e}") from None
        phases = [p.status.phase if p.status else None for p in pods.items]
        count = running_pods(phases)
        return [self.sample(float(count), now, unit="pods", labels={"listed": str(len(phases))})]
