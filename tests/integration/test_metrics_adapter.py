"""The real HPA controller scales a Deployment on governor's window, served by
governor-metrics-adapter through the real aggregation layer; the adapter and RBAC turn away
whoever is not allowed.

Real: Kafka, the kube-apiserver (with its aggregator and front proxy), kube-controller-manager
running only the HPA controller as kube-system/horizontal-pod-autoscaler, and the adapter as a
process. The dev control plane has no Deployment controller: the test mirrors spec.replicas into
status.replicas, as one would (the HPA's AverageValue divides by status.replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from kubernetes_asyncio.client import ApiClient

from governor import bus
from governor.events import LOAD, LoadWindow, Topic
from governor.external_metrics import GROUP_VERSION
from governor.kube import Kube, KubeError
from governor.topics import ensure_topics
from governor_tools import aggregation
from tests.fixtures.kube import KubeIdentities
from tests.support.procs import Service, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

APISERVICE = "v1beta1.external.metrics.k8s.io"
SERVICE = "governor-metrics-adapter"
ADAPTER = Path(sys.executable).with_name("governor-metrics-adapter")
TARGET_PER_POD = 10  # rps per replica
OFFERED = 45.0  # rps: the HPA must settle on ceil(45 / 10) = 5 replicas


async def _until(what: str, probe: Any, timeout_s: float, every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(every_s)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s (last: {last!r})")


@pytest_asyncio.fixture
async def adapter(
    hpa_controller: Path, kube_api: ApiClient, kafka_bootstrap: str, unique_topic: str,
    unique_namespace: str, tmp_path: Path,
) -> AsyncIterator[tuple[Kube, Topic[LoadWindow], int]]:  # fmt: skip
    """The adapter as a process behind the APIService; yields (admin Kube, load topic, port)."""
    kube = Kube(kube_api)
    topic: Topic[LoadWindow] = Topic(unique_topic, LoadWindow, LOAD.key, LOAD.key_doc)
    await ensure_topics(kafka_bootstrap, [topic], partitions=1)
    ca, crt, key = await asyncio.to_thread(
        aggregation.local_serving_pair, tmp_path, SERVICE, unique_namespace
    )
    port, http_port = free_port(), free_port()
    proc = Service(
        str(ADAPTER),
        {
            "GOVERNOR_METRICS_ADAPTER_KAFKA__BOOTSTRAP": kafka_bootstrap,
            "GOVERNOR_METRICS_ADAPTER_LOAD_TOPIC": unique_topic,
            "GOVERNOR_METRICS_ADAPTER_KUBECONFIG": str(hpa_controller),
            "GOVERNOR_METRICS_ADAPTER_SERVE__HOST": "127.0.0.1",
            "GOVERNOR_METRICS_ADAPTER_SERVE__PORT": str(port),
            "GOVERNOR_METRICS_ADAPTER_SERVE__TLS_CERT_FILE": str(crt),
            "GOVERNOR_METRICS_ADAPTER_SERVE__TLS_KEY_FILE": str(key),
            "GOVERNOR_METRICS_ADAPTER_HTTP__HOST": "127.0.0.1",
            "GOVERNOR_METRICS_ADAPTER_HTTP__PORT": str(http_port),
        },
        http_port,
        tmp_path / "adapter.log",
    )
    await asyncio.to_thread(proc.start)
    await aggregation.register(
        kube, GROUP_VERSION, namespace=unique_namespace, service=SERVICE, port=port,
        ca_bundle=ca.read_bytes(), field_manager="test",
    )  # fmt: skip

    try:
        available = lambda: aggregation.is_available(kube, APISERVICE)  # noqa: E731
        await _until("APIService Available", available, 120)
        yield kube, topic, port
    finally:
        with contextlib.suppress(KubeError):
            await kube.delete("apiregistration.k8s.io/v1", "apiservices", APISERVICE)
        await asyncio.to_thread(proc.stop)


async def _publish(bootstrap: str, topic: Topic[LoadWindow], workload: str, stop: asyncio.Event):
    """The aggregator's running estimate of the stable window, twice a second (the adapter
    reads from the newest offsets, so windows must keep coming)."""
    async with bus.Producer(bootstrap) as producer:
        while not stop.is_set():
            now = time.time()
            w = LoadWindow(workload=workload, metric="rps", window="stable", start=now - 60,
                           end=now, count=60, mean=OFFERED, max=OFFERED, p95=OFFERED,
                           newest_sample=now, closed=False)  # fmt: skip
            await producer.send(topic, w)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)


def _deployment(namespace: str) -> dict[str, Any]:
    labels = {"app": "web"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "web", "image": "web:1"}]}}},
    }  # fmt: skip


def _hpa(namespace: str) -> dict[str, Any]:
    selector = {"governor.dev/kind": "Deployment", "governor.dev/name": "web", "window": "stable"}
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [{"type": "External", "external": {
                "metric": {"name": "rps", "selector": {"matchLabels": selector}},
                "target": {"type": "AverageValue", "averageValue": str(TARGET_PER_POD)}}}],
        },
    }  # fmt: skip


async def _mirror_status(kube: Kube, namespace: str, stop: asyncio.Event) -> None:
    """What the Deployment controller would report: status.replicas = spec.replicas."""
    while not stop.is_set():
        with contextlib.suppress(KubeError):
            d = await kube.get("apps/v1", "deployments", "web", namespace=namespace)
            n = d["spec"]["replicas"]
            if (d.get("status") or {}).get("replicas") != n:
                await kube.merge_patch("apps/v1", "deployments", "web",
                                       {"status": {"replicas": n, "readyReplicas": n}},
                                       namespace=namespace, subresource="status")  # fmt: skip
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


async def test_the_real_hpa_scales_a_deployment_on_governors_window(
    adapter: tuple[Kube, Topic[LoadWindow], int], kafka_bootstrap: str, unique_namespace: str,
    kube_identity: KubeIdentities,
) -> None:  # fmt: skip
    kube, topic, port = adapter
    ns = unique_namespace
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(_publish(kafka_bootstrap, topic, f"{ns}/Deployment/web", stop)),
        asyncio.create_task(_mirror_status(kube, ns, stop)),
    ]
    try:
        await kube.create("apps/v1", "deployments", _deployment(ns), namespace=ns)
        path = f"/apis/{GROUP_VERSION}/namespaces/{ns}/rps"
        query = [("labelSelector", "governor.dev/kind=Deployment,governor.dev/name=web")]

        async def served() -> Any:
            got = await kube.request("GET", path, query=query)
            return got if got["items"] else None

        # Through the API server, as the admin: governor's window, in milli-units.
        listed = await _until("the window through the aggregation layer", served, 60)
        assert listed["items"][0]["value"] == f"{int(OFFERED * 1000)}m"

        await kube.create("autoscaling/v2", "horizontalpodautoscalers", _hpa(ns), namespace=ns)

        async def scaled() -> Any:
            d = await kube.get("apps/v1", "deployments", "web", namespace=ns)
            return d["spec"]["replicas"] == 5 and d

        await _until("the HPA scaled web to ceil(45/10) = 5", scaled, 180)

        async def settled() -> Any:  # its status catches up on the next sync: 45 / 5 per pod
            hpa = await kube.get("autoscaling/v2", "horizontalpodautoscalers", "web", namespace=ns)
            current = (hpa.get("status") or {}).get("currentMetrics") or [{}]
            ext = current[0].get("external") or {}
            return ext.get("current", {}).get("averageValue") in ("9", "9000m") and ext

        ext = await _until("the HPA's status: 9 rps per replica", settled, 60)
        assert ext["metric"]["name"] == "rps"

        # Who may not read it: a user without RBAC (403 from the API server), an anonymous
        # caller (401/403), and anyone who dials the adapter itself without the front proxy's
        # certificate (401 from the adapter).
        user = await kube_identity.devcluster_user()
        with pytest.raises(KubeError) as denied:
            await Kube(user.api).request("GET", path, query=query)
        assert denied.value.status == 403, denied.value
        cfg = kube.api.configuration
        server = cfg.host.rstrip("/")
        tls = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{server}{path}", params=query, ssl=tls) as r:
                assert r.status in (401, 403), await r.text()
            no_verify = ssl.create_default_context()
            no_verify.check_hostname = False
            no_verify.verify_mode = ssl.CERT_NONE
            direct = f"https://127.0.0.1:{port}{path}"
            async with http.get(direct, params=query, ssl=no_verify) as r:
                assert r.status == 401, await r.text()
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(KubeError):
            await kube.delete("autoscaling/v2", "horizontalpodautoscalers", "web", namespace=ns)
