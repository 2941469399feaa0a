"""The default machine path (README, "On your cluster"), secure as shipped: `kubectl apply
--server-side -k deploy/k8s/base`, or the chart with one bootstrap setting; one Secret per
service principal, made with the README's `kubectl create secret`; then governor runs as it
would in its pods, here as local processes on the secure broker (SASL_SSL, SCRAM-SHA-512, the
topic table's ACLs: `kafka.sh up --secure`). Each process gets the config file the ConfigMap on
the API server holds, its Secrets as its Deployment mounts them (the Secrets' keys as files, the
mount paths mapped to local folders) and, for those that talk to Kubernetes, its own
ServiceAccount's token. The metrics adapter runs too, off the decision path: with its Kafka
Secret, its serving pair (the Secret governor-metrics-adapter-tls, made with the README's
`kubectl create secret tls`) and its token, it must get ready (its ACL on governor.load, its
RBAC on the front proxy's trust). A ScalingPolicy and a Deployment, samples on Kafka as the
principal `metrics-producer`: the actuator applies one decision, and `governor explain` (as
`viewer`) tells why.

Environment overrides on top of the rendered files are only what a pod does not need: local
ports and a local state folder. The topics are the contract's (the ACLs name them); this run's
namespace keeps its workload apart from other tests' records.
"""

from __future__ import annotations

import asyncio
import base64
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
from governor.kafka_security import ENV_CA_FILE, ENV_PASSWORD_FILE, ENV_PROTOCOL, ENV_USERNAME
from governor.kube import Kube
from governor_tools.aggregation import serving_pair
from tests.fixtures.kafka_secure import SecureBroker
from tests.fixtures.kube import governor_kube
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
# The services run here, and the Kubernetes ServiceAccount each runs as (None: no API access).
SERVICES = {
    "cluster-collector": "governor-cluster-collector",
    "aggregator": None,
    "decider": None,
    "actuator": "governor-actuator",
    "metrics-adapter": "governor-metrics-adapter",
}


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


def explain(workload: str, broker: SecureBroker, kubeconfig: Path) -> str:
    """`governor explain` as a user with the read-only principal `viewer` runs it."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env |= {
        ENV_PROTOCOL: "SASL_SSL",
        ENV_USERNAME: "viewer",
        ENV_PASSWORD_FILE: str(broker.password_file("viewer")),
        ENV_CA_FILE: str(broker.ca_file),
    }
    argv = [str(BIN / "governor"), "explain", workload, "--bootstrap", broker.bootstrap,
            "--kubeconfig", str(kubeconfig)]  # fmt: skip
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env=env, check=True
    ).stdout


def create_kafka_secrets(kubeconfig: Path, broker: SecureBroker, folder: Path) -> None:
    """deploy/k8s/README.md, "Kafka": one Secret governor-kafka-<service> (password, ca.pem),
    made with its `kubectl create secret generic`; `--dry-run=client | apply` so that a rerun
    on this API server replaces the previous run's."""
    for service in SERVICES:
        pw = folder / f"{service}.password"
        pw.write_text(broker.password(service))
        manifest = kubectl(kubeconfig, "-n", SYSTEM_NS, "create", "secret", "generic",
                           f"governor-kafka-{service}", f"--from-file=password={pw}",
                           f"--from-file=ca.pem={broker.ca_file}",
                           "--dry-run=client", "-o", "yaml")  # fmt: skip
        kubectl(
            kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifest
        )


def create_adapter_tls_secret(kubeconfig: Path, folder: Path) -> None:
    """README, "On your cluster": the metrics adapter's serving pair, a Secret of type tls for
    governor-metrics-adapter.governor-system.svc (here signed by a throwaway CA)."""
    _, crt, key = serving_pair(folder, f"governor-metrics-adapter.{SYSTEM_NS}.svc")
    manifest = kubectl(kubeconfig, "-n", SYSTEM_NS, "create", "secret", "tls",
                       "governor-metrics-adapter-tls", f"--cert={crt}",
                       f"--key={key}", "--dry-run=client", "-o", "yaml")  # fmt: skip
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifest)


async def mounted_config(kube: Kube, service: str, config_text: str, root: Path) -> str:
    """The config file as the pod sees it: the service's Deployment (on the API server) mounts
    the Secrets of its volumes (`kafka`; the adapter's `tls` too) at paths; here each Secret's
    keys are files in a local folder and the config's paths under its mount point to it."""
    d = await kube.get("apps/v1", "deployments", f"governor-{service}", namespace=SYSTEM_NS)
    spec = d["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert "kafka" in secrets, (service, secrets)
    for volume, secret_name in secrets.items():
        secret = await kube.get("v1", "secrets", secret_name, namespace=SYSTEM_NS)
        folder = root / service / volume
        folder.mkdir(parents=True)
        for key, value in secret["data"].items():
            (folder / key).write_bytes(base64.b64decode(value))
        assert mounts[volume] in config_text, (service, mounts[volume])
        config_text = config_text.replace(mounts[volume], str(folder))
    return config_text


@pytest_asyncio.fixture
async def admin(kubeconfig_path: Path) -> AsyncIterator[Kube]:
    async with governor_kube(kubeconfig_path) as kube:
        yield kube


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
    admin: Kube,
    kubeconfig_path: Path,
    kafka_secure: SecureBroker,
    tmp_path: Path,
    unique_suffix: str,
) -> None:
    ns = f"shop-{unique_suffix}"
    bootstrap = kafka_secure.bootstrap
    # A user runs one of the two; here both, the chart second with the bootstrap and the
    # namespace of this run. --force-conflicts: this API server may hold either from earlier runs
    # (the chart's `helm install` too), and the ConfigMap's bootstrap differs between them.
    kubectl(kubeconfig_path, "apply", "--server-side", "--force-conflicts", "-k", str(BASE))
    rendered = helm_template(
        "namespace.create=true", f"kafka.bootstrap={bootstrap}", f"allowedNamespaces={{{ns}}}"
    )
    await admin.create("v1", "namespaces", {"metadata": {"name": ns}})
    kubectl(
        kubeconfig_path, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=rendered
    )
    create_kafka_secrets(kubeconfig_path, kafka_secure, tmp_path)
    create_adapter_tls_secret(kubeconfig_path, tmp_path)
    await install_crds(admin)  # the other projects' CRDs the actuator and collector look for

    # Each service's config file, as its pod would mount it from the ConfigMap, with its Secret.
    config = await admin.get("v1", "configmaps", "governor-config", namespace=SYSTEM_NS)
    files: dict[str, Path] = {}
    for name in SERVICES:
        files[name] = tmp_path / f"{name}.yaml"
        text = await mounted_config(admin, name, config["data"][f"{name}.yaml"], tmp_path)
        files[name].write_text(text)
    tokens = {
        sa: await service_account_kubeconfig(
            admin, kubeconfig_path, tmp_path / f"{sa}.kubeconfig", name=sa
        )
        for sa in SERVICES.values()
        if sa is not None
    }

    def service(name: str, port_var: str, **env: str) -> Service:
        prefix = f"GOVERNOR_{name.upper().replace('-', '_')}_"
        port = free_port()
        values = {"CONFIG": str(files[name]), port_var: str(port), **env}
        sa = SERVICES[name]
        if sa is not None:
            values["KUBECONFIG"] = str(tokens[sa])
        return Service(
            str(BIN / f"governor-{name}"),
            {prefix + k: v for k, v in values.items()},
            port,
            tmp_path / f"{name}.log",
        )

    services = [
        # LEASE_NAMESPACE: what a pod reads from its ServiceAccount mount (its Role is there)
        service(
            "cluster-collector", "METRICS_PORT", METRICS_HOST="127.0.0.1", LEASE_NAMESPACE=SYSTEM_NS
        ),
        service(
            "aggregator",
            "HTTP_PORT",
            HTTP_HOST="127.0.0.1",
            DATA_DIR=str(tmp_path / "agg"),
            PUBLISH_INTERVAL_MS="300",
        ),
        service("decider", "HTTP_PORT", HTTP_HOST="127.0.0.1"),
        service("actuator", "HTTP__PORT", HTTP__HOST="127.0.0.1"),
        service(
            "metrics-adapter",
            "HTTP__PORT",
            HTTP__HOST="127.0.0.1",
            SERVE__HOST="127.0.0.1",
            SERVE__PORT="0",
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

        # An app writing its samples directly (docs/topics.md), as `metrics-producer`.
        producer = Producer(bootstrap, security=kafka_secure.security("metrics-producer"))
        async with producer:

            async def scaled() -> dict[str, Any]:
                sample = events.MetricSample(
                    workload=workload, metric="rps", value=42.0, timestamp=time.time()
                )
                await producer.send(events.METRICS, sample)
                obj = await admin.get("apps/v1", "deployments", "web", namespace=ns)
                assert obj["spec"]["replicas"] == 5, obj["spec"]["replicas"]
                return obj

            obj = await eventually(scaled, within_s=150, interval=0.5)
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
    text = await asyncio.to_thread(explain, workload, kafka_secure, kubeconfig_path)
    print(text)
    assert "1 -> 5  applied" in text
    assert "GovernorScaled" in text
    assert f"governor.dev/decision-id: {annotations['governor.dev/decision-id']}" in text
    logs = "".join(s.log_path.read_text(errors="replace") for s in services)
    for name in SERVICES:
        assert kafka_secure.password(name) not in logs, f"{name}'s password in a log"
