"""`governor import`: HPA and KEDA objects become ScalingPolicies; what can't is said."""

from pathlib import Path

import msgspec
import pytest
import yaml
from typer.testing import CliRunner

from governor.importer import ConversionError, convert
from governor.spec import KafkaLagSource, PrometheusSource, ResourceSource, policies_from_yaml
from governor_tools.cli import app

DATA = Path(__file__).parent / "data" / "hpa-and-keda.yaml"


def docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(DATA.read_text()) if d]


def test_hpa_keeps_target_bounds_metrics_and_behavior_verbatim() -> None:
    hpa = docs()[0]
    result = convert(hpa)
    p = result.policy
    assert p.workload == "web/Deployment/php-apache"
    assert (p.spec.min_replicas, p.spec.max_replicas) == (1, 10)
    cpu, pps, queue = p.spec.metrics
    assert isinstance(cpu.source, ResourceSource)
    assert cpu.source.resource == "cpu"
    assert cpu.target.average_utilization == 50
    assert pps.target.average_value == 1000.0  # "1k"
    assert queue.target.average_value == 30.0
    assert any("queue_messages_ready" in n for n in result.notes)
    assert any("selector" in n for n in result.notes)
    assert msgspec.to_builtins(p.spec.behavior) == hpa["spec"]["behavior"]


def test_keda_kafka_prometheus_zero_and_fallback() -> None:
    result = convert(docs()[1])
    p = result.policy
    assert p.workload == "orders/Deployment/orders-consumer"
    assert (p.spec.min_replicas, p.spec.max_replicas) == (0, 24)
    assert p.spec.scale_to_zero is not None
    assert p.spec.scale_to_zero.cooldown_seconds == 120
    assert p.spec.scale_to_zero.activation_threshold == 10  # max of the triggers' activations
    kafka, prom = p.spec.metrics
    assert isinstance(kafka.source, KafkaLagSource)
    assert kafka.source.lag_threshold == 50
    assert kafka.source.exclude_persistent_lag is True
    assert kafka.source.offset_reset_policy == "earliest"
    assert kafka.target.average_value == 50
    assert isinstance(prom.source, PrometheusSource)
    assert prom.source.interval_seconds == 15
    assert prom.target.average_value == 100
    assert p.spec.fallback is not None
    assert (p.spec.fallback.replicas, p.spec.fallback.behavior) == (6, "currentReplicasIfHigher")
    assert p.spec.behavior is not None
    assert p.spec.behavior.scale_down is not None
    assert p.spec.behavior.scale_down.stabilization_window_seconds == 60
    assert any("rabbitmq" in u for u in result.unconverted)
    assert any("paused" in n for n in result.notes)


def test_nothing_convertible_is_an_error_naming_why() -> None:
    so = docs()[1]
    so["spec"]["triggers"] = [so["spec"]["triggers"][2]]
    with pytest.raises(ConversionError, match="rabbitmq"):
        convert(so)


def test_wrong_kind_says_what_is_expected() -> None:
    with pytest.raises(ConversionError, match="HorizontalPodAutoscaler"):
        convert({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}})


def test_cli_writes_policies_that_validate_and_reports_on_stderr(tmp_path: Path) -> None:
    out = tmp_path / "policies.yaml"
    result = CliRunner().invoke(app, ["import", str(DATA), "--out", str(out)])
    assert result.exit_code == 0, result.output
    policies = policies_from_yaml(out.read_text())
    assert [p.metadata.name for p in policies] == ["php-apache", "orders-consumer"]
    assert "cannot convert" in result.output
    assert "rabbitmq" in result.output
