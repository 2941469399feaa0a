"""deploy/helm/governor against the kustomize base, with real helm (built from its Go module by
deploy/helm/helm.sh) and the real API server.

- `helm lint` passes, with the defaults and with every option on;
- `helm template` with the default values renders the base's objects: the same kinds, names,
  namespaces, RBAC rules, Deployments and config (Helm's own labels aside). The base creates its
  namespace; the chart leaves that to `helm install --create-namespace` unless
  `namespace.create=true`, with which the two are equal object for object;
- `kafka.security=plaintext` renders deploy/k8s/overlays/plaintext (trials: no Secrets, no
  provisioning Job);
- with `serviceMonitor.enabled` and `prometheusRule.enabled` it adds the objects of
  deploy/k8s/overlays/monitoring;
- by default (sasl_ssl) each service is its own principal, its password and CA from the Secret
  governor-kafka-<service> its pod mounts, and each config file loads with the service's own
  settings type; another kafka.security value is refused, naming the value;
- `helm install` (helm 4: server-side apply) installs it on the dev kube-apiserver.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.settings import load_settings
from tests.integration.test_actuator_kit import ident, kubectl_kustomize, render_base
from tests.support.ci import unavailable
from tests.support.service_settings import SETTINGS, kafka_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "governor"
HELM_SH = REPO / "deploy" / "helm" / "helm.sh"
MONITORING = REPO / "deploy" / "k8s" / "overlays" / "monitoring"
PLAINTEXT = REPO / "deploy" / "k8s" / "overlays" / "plaintext"
NAMESPACE = "governor-system"
HELM_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart")


@pytest.fixture(scope="module")
def helm() -> str:
    """The cached helm binary (built on first use: minutes, with progress)."""
    done = subprocess.run(
        ["bash", str(HELM_SH), "path"], capture_output=True, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        unavailable(f"helm could not be built: {done.stderr.strip()[-500:]}")
    return done.stdout.strip().splitlines()[-1]


def template(helm: str, *sets: str) -> list[dict[str, Any]]:
    args = [helm, "template", "governor", str(CHART), "-n", NAMESPACE, "--include-crds"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def normalized(obj: dict[str, Any]) -> dict[str, Any]:
    """Without Helm's own labels; config files compared as the YAML they hold."""
    obj = yaml.safe_load(yaml.safe_dump(obj))  # a deep copy
    labels = obj.get("metadata", {}).get("labels") or {}
    for k in HELM_LABELS:
        labels.pop(k, None)
    if obj["kind"] == "ConfigMap":
        obj["data"] = {k: yaml.safe_load(v) for k, v in (obj.get("data") or {}).items()}
    return obj


def by_ident(objs: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    out = {ident(o): normalized(o) for o in objs}
    assert len(out) == len(objs), "two objects with the same kind, namespace and name"
    return out


def test_helm_lint_passes_with_defaults_and_every_option(helm: str) -> None:
    for sets in ([], ["kafka.security=plaintext", "serviceMonitor.enabled=true",
                      "prometheusRule.enabled=true", "namespace.create=true"]):  # fmt: skip
        args = [helm, "lint", str(CHART)] + [a for s in sets for a in ("--set", s)]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 chart(s) failed" in done.stdout


def test_default_values_render_the_kustomize_base(helm: str) -> None:
    base = by_ident(render_base())
    chart = by_ident(template(helm))
    namespace = ("v1", "Namespace", "", NAMESPACE)
    assert set(chart) == set(base) - {namespace}
    for key, obj in chart.items():
        assert obj == base[key], key
    assert by_ident(template(helm, "namespace.create=true")) == base


def overlay(path: Path) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    objs = kubectl_kustomize(path)
    if objs is None:
        unavailable("kubectl is not on PATH (apt-get install kubectl): no kustomize to compare")
    return by_ident(objs)


def assert_same(got: dict[Any, dict[str, Any]], want: dict[Any, dict[str, Any]]) -> None:
    assert set(got) == set(want)
    for key, obj in got.items():
        assert obj == want[key], key


def test_plaintext_renders_the_plaintext_overlay(helm: str) -> None:
    got = by_ident(
        template(
            helm,
            "namespace.create=true",
            "kafka.security=plaintext",
            "kafka.bootstrap=kafka.governor-system.svc:9092",
        )
    )
    assert not [k for k in got if k[1] in ("Job", "Secret")]
    assert_same(got, overlay(PLAINTEXT))


def test_the_monitoring_options_render_the_monitoring_overlay(helm: str) -> None:
    got = by_ident(
        template(
            helm,
            "namespace.create=true",
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
        )
    )
    assert_same(got, overlay(MONITORING))


def test_values_move_what_they_name(helm: str) -> None:
    objs = template(
        helm,
        "kafka.bootstrap=kafka.prod:9093",
        "allowedNamespaces={shop,ml}",
        "services.decider.replicas=3",
        "services.actuator.resources.requests.cpu=250m",
    )
    # The actuator's target access (the metrics adapter's kube-system RoleBinding aside).
    bindings = sorted(
        o["metadata"]["namespace"]
        for o in objs
        if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == "governor-actuator-targets"
    )
    assert bindings == ["ml", "shop"]
    (config,) = [o for o in objs if o["kind"] == "ConfigMap"]
    actuator = yaml.safe_load(config["data"]["actuator.yaml"])
    assert actuator["allowed_namespaces"] == ["shop", "ml"]
    for name, text in config["data"].items():
        settings = yaml.safe_load(text)  # the cluster collector's bootstrap is a top-level field
        assert settings.get("kafka", settings)["bootstrap"] == "kafka.prod:9093", name
    deployments = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}
    assert deployments["governor-decider"]["spec"]["replicas"] == 3
    (c,) = deployments["governor-actuator"]["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["requests"]["cpu"] == "250m"


def test_sasl_ssl_each_service_is_its_own_principal_from_its_secret(
    helm: str, tmp_path: Path
) -> None:
    objs = template(helm, "kafka.bootstrap=kafka.prod:9094")
    (config,) = [o for o in objs if o["kind"] == "ConfigMap"]
    deployments = [o for o in objs if o["kind"] == "Deployment"]
    assert len(deployments) == len(SETTINGS)
    for d in deployments:
        name = d["metadata"]["name"].removeprefix("governor-")
        spec = d["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["kafka"]["secret"]["secretName"] == f"governor-kafka-{name}"
        # The file as the service reads it, with its own settings type (typos fail here).
        file = tmp_path / f"{name}.yaml"
        file.write_text(config["data"][f"{name}.yaml"])
        settings = load_settings(SETTINGS[name], "UNUSED", env={}, file=file)
        sec, bootstrap = kafka_of(settings)
        assert bootstrap == "kafka.prod:9094"
        assert (sec.protocol, sec.mechanism, sec.username) == ("SASL_SSL", "SCRAM-SHA-512", name)
        assert sec.password_file == f"{mounts['kafka']}/password"
        assert sec.ca_file == f"{mounts['kafka']}/ca.pem"
    (job,) = [o for o in objs if o["kind"] == "Job"]
    (volume,) = job["spec"]["template"]["spec"]["volumes"]
    assert volume["secret"]["secretName"] == "governor-kafka-admin"

    done = subprocess.run(
        [helm, "template", str(CHART), "--set", "kafka.security=tls"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert 'kafka.security must be plaintext or sasl_ssl, not "tls"' in done.stderr


def test_helm_install_on_the_dev_apiserver(helm: str, kubeconfig_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    # --take-ownership, --force-conflicts: other tests (and earlier runs on this API server) may
    # have applied the base's objects (same names) with kubectl already.
    args = [helm, "upgrade", "--install", "governor", str(CHART), "-n", NAMESPACE,
            "--create-namespace", "--take-ownership", "--force-conflicts",
            "--kubeconfig", str(kubeconfig_path)]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env, check=False)
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr
    assert "STATUS: deployed" in done.stdout
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        unavailable("kubectl is not on PATH (apt-get install kubectl)")
    # Server-side apply: each object's fields are owned by the manager "helm" through "Apply".
    out = subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig_path), "get", "deploy,sa,cm", "-n", NAMESPACE,
         "-l", "app.kubernetes.io/instance=governor", "-o", "json", "--show-managed-fields"],
        capture_output=True, text=True, timeout=60, env=env, check=True,
    ).stdout  # fmt: skip
    items = json.loads(out)["items"]
    names = {(o["kind"], o["metadata"]["name"]) for o in items}
    want = {
        ("Deployment", f"governor-{s}") for s in ("collector", "aggregator", "decider", "actuator")
    }
    assert want | {("ConfigMap", "governor-config")} <= names, names
    for o in items:
        managers = {(m["manager"], m["operation"]) for m in o["metadata"]["managedFields"]}
        assert ("helm", "Apply") in managers, (o["metadata"]["name"], managers)
