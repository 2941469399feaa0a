"""deploy/k8s/overlays/monitoring: it renders (kubectl kustomize, where kubectl is), its
ServiceMonitor finds a Service for every governor Deployment on a port the container serves,
and its PrometheusRule carries exactly deploy/prometheus/rules/governor.rules.yaml.

After editing the rules file: `uv run python tests/unit/test_k8s_monitoring_overlay.py`
rewrites prometheusrule.yaml."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from governor.settings import load_settings
from governor_actuator.config import ActuatorSettings
from governor_aggregator.main import AggregatorSettings
from governor_collector.cluster.collector import ClusterCollectorSettings
from governor_collector.config import CollectorSettings
from governor_decider.main import DeciderSettings
from governor_metrics_adapter.config import MetricsAdapterSettings
from tests.support.ci import unavailable

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "k8s" / "overlays" / "monitoring"
BASE = ROOT / "deploy" / "k8s" / "base"
RULES = ROOT / "deploy" / "prometheus" / "rules" / "governor.rules.yaml"
HEADER = (
    "# GENERATED: the groups of deploy/prometheus/rules/governor.rules.yaml (the source of\n"
    "# truth) as a PrometheusRule. After editing that file run\n"
    "#   uv run python tests/unit/test_k8s_monitoring_overlay.py\n"
)
SETTINGS: dict[str, tuple[type[Any], str]] = {
    "collector": (CollectorSettings, "GOVERNOR_COLLECTOR"),
    "cluster-collector": (ClusterCollectorSettings, "GOVERNOR_CLUSTER_COLLECTOR"),
    "aggregator": (AggregatorSettings, "GOVERNOR_AGGREGATOR"),
    "decider": (DeciderSettings, "GOVERNOR_DECIDER"),
    "actuator": (ActuatorSettings, "GOVERNOR_ACTUATOR"),
    "metrics-adapter": (MetricsAdapterSettings, "GOVERNOR_METRICS_ADAPTER"),
}


def prometheus_rule() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "governor",
            "namespace": "governor-system",
            "labels": {"app.kubernetes.io/part-of": "governor"},
        },
        "spec": {"groups": yaml.safe_load(RULES.read_text())["groups"]},
    }


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _overlay_objects() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    objs: list[dict[str, Any]] = []
    for res in kustomization["resources"]:
        path = (OVERLAY / res).resolve()
        assert path.exists(), f"{res} listed in the overlay does not exist"
        if path.is_file():
            objs += _docs(path)
    return objs


def test_overlay_lists_the_base_and_its_own_files() -> None:
    kustomization = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    assert "../../base" in kustomization["resources"]
    kinds = {o["kind"] for o in _overlay_objects()}
    assert {"Service", "ServiceMonitor", "PrometheusRule"} <= kinds


def test_prometheus_rule_is_the_rules_file() -> None:
    on_disk = _docs(OVERLAY / "prometheusrule.yaml")
    assert on_disk == [prometheus_rule()], (
        "prometheusrule.yaml differs from deploy/prometheus/rules/governor.rules.yaml: run "
        "`uv run python tests/unit/test_k8s_monitoring_overlay.py`"
    )


def test_service_monitor_selects_a_service_per_deployment_on_its_port() -> None:
    objs = _overlay_objects()
    monitor = next(o for o in objs if o["kind"] == "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [
        o
        for o in objs
        if o["kind"] == "Service" and selector.items() <= o["metadata"]["labels"].items()
    ]
    deployments = [d for d in _docs(BASE / "deployments.yaml") if d["kind"] == "Deployment"]
    assert len(services) == len(deployments) == 6
    port_name = monitor["spec"]["endpoints"][0]["port"]
    job_label = monitor["spec"]["jobLabel"]
    for d in deployments:
        labels = d["spec"]["template"]["metadata"]["labels"]
        svc = [s for s in services if s["spec"]["selector"].items() <= labels.items()]
        assert len(svc) == 1, d["metadata"]["name"]
        assert svc[0]["metadata"]["labels"][job_label] == d["metadata"]["name"]  # job label
        assert svc[0]["metadata"]["namespace"] == d["metadata"]["namespace"]
        ports = {p["name"] for s in svc for p in s["spec"]["ports"]}
        assert port_name in ports
        container = d["spec"]["template"]["spec"]["containers"][0]
        assert port_name in {p["name"] for p in container["ports"]}


def _served_port(deployment: dict[str, Any]) -> tuple[str, int]:
    """(host, port) the container's service listens on: base config file + container env."""
    name = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
    cls, prefix = SETTINGS[name]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    file = BASE / "config" / Path(env[f"{prefix}_CONFIG"]).name
    s = load_settings(cls, prefix, env=env, file=file)
    if hasattr(s, "metrics_port"):  # the cluster collector
        return s.metrics_host, s.metrics_port
    return (s.http_host, s.http_port) if hasattr(s, "http_port") else (s.http.host, s.http.port)


def test_every_container_serves_metrics_on_its_http_port() -> None:
    wrong = {}
    for d in _docs(BASE / "deployments.yaml"):
        container = d["spec"]["template"]["spec"]["containers"][0]
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == "http")
        host, served = _served_port(d)
        if (host, served) != ("0.0.0.0", port):
            wrong[d["metadata"]["name"]] = f"listens on {host}:{served}, containerPort {port}"
    assert not wrong, wrong


def test_overlay_renders_with_kubectl_kustomize() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        unavailable("kubectl not on PATH")
    out = subprocess.run(
        [kubectl, "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d]
    ids = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    assert ("ServiceMonitor", "governor") in ids and ("PrometheusRule", "governor") in ids
    for name in ("collector", "cluster-collector", "aggregator", "decider", "actuator"):
        assert ("Service", f"governor-{name}") in ids
        assert ("Deployment", f"governor-{name}") in ids  # the base is in
    rule = next(o for o in rendered if o["kind"] == "PrometheusRule")
    assert rule["spec"] == prometheus_rule()["spec"]


if __name__ == "__main__":
    text = HEADER + yaml.safe_dump(prometheus_rule(), sort_keys=False, width=100)
    (OVERLAY / "prometheusrule.yaml").write_text(text)
    print(OVERLAY / "prometheusrule.yaml")
