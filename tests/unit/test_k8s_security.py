"""The kustomize base runs every service on SASL_SSL as its own principal, from a Secret, and
the collector's push endpoint with Kubernetes auth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.events import PRINCIPALS
from governor.settings import load_settings
from governor_collector.config import CollectorSettings
from governor_metrics_adapter.config import MetricsAdapterSettings
from tests.support.service_settings import SETTINGS, kafka_of

BASE = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "base"


def _deployments() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((BASE / "deployments.yaml").read_text())
    return {d["metadata"]["name"].removeprefix("governor-"): d for d in docs}


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_each_service_is_its_own_principal_from_its_secret(service: str) -> None:
    s = load_settings(SETTINGS[service], "UNUSED", env={}, file=BASE / "config" / f"{service}.yaml")
    sec, _ = kafka_of(s)
    assert (sec.protocol, sec.mechanism, sec.username) == ("SASL_SSL", "SCRAM-SHA-512", service)
    assert service in PRINCIPALS
    spec = _deployments()[service]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["kafka"] == "/var/run/secrets/governor/kafka"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["kafka"]["secret"]["secretName"] == f"governor-kafka-{service}"
    assert sec.password_file == f"{mounts['kafka']}/password"
    assert sec.ca_file == f"{mounts['kafka']}/ca.pem"


def test_the_collector_authenticates_pushes_with_the_cluster() -> None:
    s = load_settings(CollectorSettings, "UNUSED", env={}, file=BASE / "config" / "collector.yaml")
    assert s.push_auth == "kubernetes"
    rbac = list(yaml.safe_load_all((BASE / "rbac-push.yaml").read_text()))
    delegator = next(d for d in rbac if d["kind"] == "ClusterRoleBinding")
    assert delegator["roleRef"]["name"] == "system:auth-delegator"
    assert delegator["subjects"][0]["name"] == "governor-collector"
    role = next(d for d in rbac if d["kind"] == "ClusterRole")
    assert role["rules"] == [
        {
            "apiGroups": ["governor.dev"],
            "resources": ["scalingpolicies/samples"],
            "verbs": ["create"],
        }
    ]


def test_every_service_uses_the_same_sasl_ssl_bootstrap() -> None:
    bootstraps = {
        service: kafka_of(
            load_settings(typ, "UNUSED", env={}, file=BASE / "config" / f"{service}.yaml")
        )[1]
        for service, typ in SETTINGS.items()
    }
    assert set(bootstraps.values()) == {"kafka.governor-system.svc:9094"}, bootstraps


def test_the_metrics_adapter_may_read_only_the_front_proxys_trust() -> None:
    """Its ServiceAccount is bound to the built-in kube-system Role that reads
    extension-apiserver-authentication, and to nothing else; the HPA controller may read
    external.metrics.k8s.io."""
    docs = [d for d in yaml.safe_load_all((BASE / "rbac-metrics-adapter.yaml").read_text()) if d]
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    mine = [b for b in bindings if b["subjects"][0]["name"] == "governor-metrics-adapter"]
    assert [(b["kind"], b["metadata"]["namespace"], b["roleRef"]["name"]) for b in mine] == [
        ("RoleBinding", "kube-system", "extension-apiserver-authentication-reader")
    ]
    hpa = next(b for b in bindings if b["subjects"][0]["name"] == "horizontal-pod-autoscaler")
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert hpa["roleRef"]["name"] == role["metadata"]["name"]
    assert role["rules"] == [
        {"apiGroups": ["external.metrics.k8s.io"], "resources": ["*"], "verbs": ["get", "list"]}
    ]
    api = next(d for d in docs if d["kind"] == "APIService")
    assert api["spec"]["service"]["name"] == "governor-metrics-adapter"
    s = load_settings(
        MetricsAdapterSettings, "UNUSED", env={}, file=BASE / "config" / "metrics-adapter.yaml"
    )
    assert s.serve.tls_cert_file.startswith("/var/run/secrets/governor/tls/")
