"""The `kubernetes_workload` source against the real kube-apiserver (the dev control plane): it
counts the pods of the policy's namespace that match the selector, set-based selectors included,
and leaves out pods that Succeeded or Failed, as KEDA does."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient

from governor.spec import KubernetesWorkloadSource as WorkloadSpec
from governor_collector.sources import SourceError
from tests.support.sources import collect_one, deployment_target

pytestmark = pytest.mark.integration


def pod(name: str, labels: dict[str, str]) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(containers=[client.V1Container(name="app", image="busybox")]),
    )


async def count(namespace: str, selector: str, kubeconfig: Path) -> float:
    sample = await collect_one(
        deployment_target(namespace, "worker", "pods"),
        WorkloadSpec(pod_selector=selector),
        1.0,
        kubeconfig=str(kubeconfig),
    )
    assert sample.unit == "pods"
    return sample.value


async def test_counts_matching_pods_that_have_not_terminated(
    kube_api: ApiClient, unique_namespace: str, kubeconfig_path: Path
) -> None:
    core = client.CoreV1Api(kube_api)
    ns = unique_namespace
    for name, labels in (
        ("a", {"app": "backend", "deploy": "canary"}),
        ("b", {"app": "backend", "deploy": "main"}),
        ("c", {"app": "backend", "deploy": "critical"}),
        ("d", {"app": "frontend"}),
    ):
        await core.create_namespaced_pod(ns, pod(name, labels))
    assert await count(ns, "app=backend", kubeconfig_path) == 3
    # KEDA's own example selector: equality and set-based requirements mixed.
    selector = "app=backend, deploy notin (critical, monolith)"
    assert await count(ns, selector, kubeconfig_path) == 2
    # The dev control plane runs no kubelet: set the phases as a kubelet would.
    for name, phase in (("a", "Succeeded"), ("b", "Running")):
        await core.patch_namespaced_pod_status(name, ns, {"status": {"phase": phase}})
    assert await count(ns, selector, kubeconfig_path) == 1
    assert await count(ns, "app=nothing", kubeconfig_path) == 0


async def test_a_bad_selector_is_the_api_servers_error(
    unique_namespace: str, kubeconfig_path: Path
) -> None:
    with pytest.raises(SourceError) as err:
        await count(unique_namespace, "app in (", kubeconfig_path)
    assert err.value.reason == "kube" and "400" in err.value.detail
