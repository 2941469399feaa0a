"""The actuator's typed config: file, then environment; the rules it hands the pure core."""

from __future__ import annotations

from pathlib import Path

import pytest

from governor.settings import ConfigError, load_settings
from governor_actuator.config import PREFIX, ActuatorSettings


def test_file_then_env(tmp_path: Path) -> None:
    cfg = tmp_path / "actuator.yaml"
    cfg.write_text(
        "allowed_namespaces: [shop, ml]\n"
        "allowed_kinds: [Deployment.apps]\n"
        "dry_run: true\n"
        "kafka: {bootstrap: 'k:9092'}\n"
    )
    env = {f"{PREFIX}_CONFIG": str(cfg), f"{PREFIX}_QPS": "7.5", f"{PREFIX}_HTTP__PORT": "9100"}
    s = load_settings(ActuatorSettings, PREFIX, env=env)
    assert s.dry_run and s.qps == 7.5 and s.http.port == 9100 and s.kafka.bootstrap == "k:9092"
    rules = s.rules()
    assert rules.namespace_allowed("ml") and not rules.namespace_allowed("default")
    assert rules.kind_allowed("Deployment", "apps/v1")
    assert not rules.kind_allowed("StatefulSet", "apps/v1")


def test_defaults_allow_nothing_but_know_the_kinds() -> None:
    s = load_settings(ActuatorSettings, PREFIX, env={})
    assert s.allowed_namespaces == [] and not s.rules().namespace_allowed("default")
    assert s.rules().kind_allowed("Job", "batch.volcano.sh/v1alpha1")
    assert s.rules().kind_allowed("PyTorchJob", "kubeflow.org/v1")


def test_typos_are_errors(tmp_path: Path) -> None:
    cfg = tmp_path / "actuator.yaml"
    cfg.write_text("allowed_namespace: [shop]\n")
    with pytest.raises(ConfigError, match="allowed_namespace"):
        load_settings(ActuatorSettings, PREFIX, env={f"{PREFIX}_CONFIG": str(cfg)})


def test_the_base_config_loads() -> None:
    base = Path(__file__).resolve().parents[2] / "deploy/k8s/base/config/actuator.yaml"
    s = load_settings(ActuatorSettings, PREFIX, env={}, file=base)
    assert s.allowed_namespaces == ["default"] and not s.dry_run
