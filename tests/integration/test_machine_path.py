"""The default machine path (README, "On your cluster"): `kubectl apply --server-side -k
deploy/k8s/base`, or the chart with one bootstrap setting; then governor runs as it would in
its pods, here as local processes: each with the config file the ConfigMap on the API server
holds and, for the two that talk to Kubernetes, its own ServiceAccount's token. A ScalingPolicy
and a Deployment, samples on Kafka: the actuator applies one decision, and `governor explain`
tells why.

Environment overrides on top of the rendered files are only what a pod does not need: local
ports, and topic/group names of this run for the internal stages (metrics -> load ->
recommendations), so that other tests' records on the shared broker stay out. Decisions and
actuations use the contract's topics, as `governor explain` reads them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from governor import events
from governor.bus import Producer
from governor.kube import Kube, connect
from governor.topics import ensure_topics
from tests.integration.test_actuator_kit import (
    BASE,
    SYSTEM_NS,
    deployment,
    eventually,
    install_crds,
    scaling_policy,
    service_account_kubeconfig,
)
from tests.support.ci import unavailable
from tests.support.procs import Service, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "governor"
BIN = Path(sys.executable).parent


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    exe = shutil.which("kubectl")
    if exe is None:
        unavailable("kubectl is not on PATH (apt-get install kubectl)")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    done = subprocess.run(
        [exe, "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def helm_template(*sets: str) -> str:
    done = subprocess.run(
        ["bash", str(REPO / "deploy" / "helm" / "helm.sh"), "path"],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        unavailable(f"helm could not be built: {done.stderr.strip()[-300:]}")
    helm = done.stdout.strip().splitlines()[-1]
    args = [helm, "template", "governor", str(CHART), "-n", SYSTEM_NS]
    for s in sets:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout


def explain(workload: str, bootstrap: str, kubeconfig: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    argv = [str(BIN / "governor"), "explain", workload, "--bootstrap", bootstrap,
            "--kubeconfig", str(kubeconfig)]  # fmt: skip
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env=env, check=True
    ).stdout


@pytest_asyncio.fixture
async def admin(kubeconfig_path: Path) -> AsyncIterator[Kube]:
    api = await connect(kubeconfig_path)
    try:
        yield Kube(api)
    finally:
        await api.close()


async def ready_deployment(kube: Kube, ns: str, name: str) -> None:
    """What the controller-manager and the kubelet would write (the dev control plane has
    neither): every replica ready."""
    obj = await kube.get("apps/v1", "deployments", name, namespace=ns)
    n = obj["spec"]["replicas"]
    status = {"observedGeneration": obj["metadata"]["generation"], "replicas": n,
              "readyReplicas": n, "availableReplicas": n, "updatedReplicas": n}  # fmt: skip
    await kube.merge_patch(
        "apps/v1", "deployments", name, {"status": status}, namespace=ns, subresource="status"
    )


async def test_base_and_chart_then_the_services_apply_one_decision(
    admin: Kube, kubeconfig_path: Path, kafka_bootstrap: str, tmp_path: Path, unique_suffix: str
) -> None:
    ns = f"shop-{unique_suffix}"
    # A user runs one of the two; here both, the chart second with the bootstrap and the
    # namespace of this run. --force-conflicts: this API server may hold either from earlier runs
    # (the chart's `helm install` too), and the ConfigMap's bootstrap differs between them.
    kubectl(kubeconfig_path, "apply", "--server-side", "--force-conflicts", "-k", str(BASE))
    rendered = helm_template(
        "namespace.create=true", f"kafka.bootstrap={kafka_bootstrap}", f"allowedNamespaces={{{ns}}}"
    )
    await admin.create("v1", "namespaces", {"metadata": {"name": ns}})
    kubectl(
        kubeconfig_path, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=rendered
    )
    await install_crds(admin)  # the other projects' CRDs the actuator and collector look for

    # Each service's config file, as its pod would mount it from the ConfigMap.
    config = await admin.get("v1", "configmaps", "governor-config", namespace=SYSTEM_NS)
    files: dict[str, Path] = {}
    for name, text in config["data"].items():
        files[name.removesuffix(".yaml")] = tmp_path / name
        (tmp_path / name).write_text(text)
    tokens = {
        sa: await service_account_kubeconfig(
            admin, kubeconfig_path, tmp_path / f"{sa}.kubeconfig", name=sa
        )
        for sa in ("governor-actuator", "governor-cluster-collector")
    }

    metrics = dataclasses.replace(events.METRICS, name=f"path-metrics-{unique_suffix}")
    load = dataclasses.replace(events.LOAD, name=f"path-load-{unique_suffix}")
    recs = dataclasses.replace(events.RECOMMENDATIONS, name=f"path-recs-{unique_suffix}")
    await ensure_topics(kafka_bootstrap)
    await ensure_topics(kafka_bootstrap, [metrics, load, recs])

    def service(name: str, port_var: str, **env: str) -> Service:
        prefix = f"GOVERNOR_{name.upper().replace('-', '_')}_"
        port = free_port()
        values = {"CONFIG": str(files[name]), port_var: str(port), **env}
        return Service(
            str(BIN / f"governor-{name}"),
            {prefix + k: v for k, v in values.items()},
            port,
            tmp_path / f"{name}.log",
        )

    services = [
        service(
            "cluster-collector",
            "METRICS_PORT",
            METRICS_HOST="127.0.0.1",
            KUBECONFIG=str(tokens["governor-cluster-collector"]),
        ),
        service(
            "aggregator",
            "HTTP_PORT",
            HTTP_HOST="127.0.0.1",
            APP_ID=f"path-agg-{unique_suffix}",
            METRICS_TOPIC=metrics.name,
            LOAD_TOPIC=load.name,
            DATA_DIR=str(tmp_path / "agg"),
            PUBLISH_INTERVAL_MS="300",
        ),
        service(
            "decider",
            "HTTP_PORT",
            HTTP_HOST="127.0.0.1",
            GROUP_ID=f"path-dec-{unique_suffix}",
            LOAD_TOPIC=load.name,
            RECOMMENDATIONS_TOPIC=recs.name,
        ),
        service(
            "actuator",
            "HTTP__PORT",
            HTTP__HOST="127.0.0.1",
            GROUP_ID=f"path-act-{unique_suffix}",
            KUBECONFIG=str(tokens["governor-actuator"]),
        ),
    ]
    await admin.create("apps/v1", "deployments", deployment(ns, "web", replicas=1), namespace=ns)
    await ready_deployment(admin, ns, "web")
    policy = scaling_policy(
        ns, "web", {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
    )
    await admin.create("governor.dev/v1alpha1", "scalingpolicies", policy, namespace=ns)
    workload = f"{ns}/Deployment/web"
    try:
        for s in services:
            await asyncio.to_thread(s.start)

        async with Producer(kafka_bootstrap) as producer:

            async def scaled() -> dict[str, Any]:
                sample = events.MetricSample(
                    workload=workload, metric="rps", value=42.0, timestamp=time.time()
                )
                await producer.send(metrics, sample)
                obj = await admin.get("apps/v1", "deployments", "web", namespace=ns)
                assert obj["spec"]["replicas"] == 5, obj["spec"]["replicas"]
                return obj

            obj = await eventually(scaled, within_s=120, interval=0.5)
        annotations = obj["metadata"]["annotations"]
        assert int(annotations["governor.dev/decision-seq"]) >= 1
        assert annotations["governor.dev/decision-id"]
    except AssertionError:
        for s in services:
            print(f"--- {s.command}\n{s.tail()}")
        raise
    finally:
        for s in services:
            await asyncio.to_thread(s.stop)

    # Why did it scale? From the contract's topics and the object, as a user asks it.
    text = await asyncio.to_thread(explain, workload, kafka_bootstrap, kubeconfig_path)
    print(text)
    assert "1 -> 5  applied" in text
    assert "GovernorScaled" in text
    assert f"governor.dev/decision-id: {annotations['governor.dev/decision-id']}" in text
