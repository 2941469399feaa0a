"""`governor import`: HPA and KEDA objects become ScalingPolicies; what can't is said."""

import json
from pathlib import Path

import msgspec
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from governor.importer import ConversionError, convert, convert_documents
from governor.spec import KafkaLagSource, PrometheusSource, ResourceSource, policies_from_yaml
from tests.support.cli import governor

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
    assert queue.name == "queue_messages_ready{queue=worker_tasks}"
    assert any("external.metric.name" in n and "push" in n for n in result.notes)
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
    assert p.metadata.annotations == {"governor.dev/paused": "true"}  # paused-replicas
    assert any("paused-replicas" in n for n in result.notes)


def test_nothing_convertible_is_an_error_naming_why() -> None:
    so = docs()[1]
    so["spec"]["triggers"] = [so["spec"]["triggers"][2]]
    with pytest.raises(ConversionError, match="rabbitmq"):
        convert(so)


def test_wrong_kind_says_what_is_expected() -> None:
    with pytest.raises(ConversionError, match="HorizontalPodAutoscaler"):
        convert({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}})


def test_cli_writes_policies_that_validate_and_reports_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "policies.yaml"
    result = governor(capsys, ["import", str(DATA), "--out", str(out)])
    assert result.code == 0, result.output
    policies = policies_from_yaml(out.read_text())
    assert [p.metadata.name for p in policies] == ["php-apache", "orders-consumer"]
    assert "not converted: spec.triggers[2] (rabbitmq): no host" in result.err


# --- what the issue found: each case as a user meets it -------------------------------------


def hpa(metrics: list[dict], api: str = "autoscaling/v2", **spec: object) -> dict:
    return {
        "apiVersion": api,
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2,
            "maxReplicas": 20,
            "metrics": metrics,
            **spec,
        },
    }


def so(triggers: list[dict], annotations: dict | None = None, **spec: object) -> dict:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "worker", "annotations": annotations or {}},
        "spec": {"scaleTargetRef": {"name": "worker"}, "triggers": triggers, **spec},
    }


def container_cpu(container: str, util: int) -> dict:
    return {
        "type": "ContainerResource",
        "containerResource": {
            "name": "cpu",
            "container": container,
            "target": {"type": "Utilization", "averageUtilization": util},
        },
    }


def external(selector: dict | None, value: str = "30") -> dict:
    metric: dict = {"name": "queue_messages_ready"}
    if selector is not None:
        metric["selector"] = selector
    return {
        "type": "External",
        "external": {"metric": metric, "target": {"type": "AverageValue", "averageValue": value}},
    }


def test_two_container_cpu_metrics_and_memory_get_distinct_names() -> None:
    memory = {
        "type": "Resource",
        "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "1Gi"}},
    }
    r = convert(hpa([container_cpu("nginx", 60), memory, container_cpu("istio-proxy", 80)]))
    names = [m.name for m in r.policy.spec.metrics]
    assert names == ["cpu{container=nginx}", "memory", "cpu{container=istio-proxy}"]
    assert any("containerResource.container" in n and "whole pod" in n for n in r.notes)


def test_externals_differing_only_by_selector_are_two_metrics() -> None:
    r = convert(
        hpa(
            [
                external({"matchLabels": {"queue": "a", "env": "prod"}}),
                external({"matchLabels": {"queue": "b"}}),
                external(None),
            ]
        )
    )
    assert [m.name for m in r.policy.spec.metrics] == [
        "queue_messages_ready{env=prod,queue=a}",
        "queue_messages_ready{queue=b}",
        "queue_messages_ready",
    ]


@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["queue", "env", "zone"]), st.sampled_from(["a", "b"]), max_size=3
        ),
        min_size=1,
        max_size=6,
    )
)
def test_names_are_unique_and_stable_whatever_the_selectors(selectors: list[dict]) -> None:
    doc = hpa([external({"matchLabels": s}) for s in selectors])
    first = [m.name for m in convert(doc).policy.spec.metrics]
    assert len(set(first)) == len(first)
    assert first == [m.name for m in convert(doc).policy.spec.metrics]


def test_keda_cpu_container_activation_and_metadata_are_not_dropped_silently() -> None:
    r = convert(
        so(
            [
                {
                    "type": "cpu",
                    "metricType": "Utilization",
                    "metadata": {"value": "60", "containerName": "app"},
                },
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": "http://prom:9090",
                        "query": "sum(up)",
                        "threshold": "10",
                        "activationThreshold": "25",
                        "ignoreNullValues": "false",
                    },
                },
            ],
            minReplicaCount=0,
            initialCooldownPeriod=120,
            advanced={"restoreToOriginalReplicaCount": True},
        )
    )
    p = r.policy.spec
    assert p.scale_to_zero is not None and p.scale_to_zero.activation_threshold == 25
    assert p.metrics[0].name == "cpu{container=app}"
    text = "\n".join(r.notes)
    for field in (
        "metadata.containerName",
        "metadata.ignoreNullValues",
        "spec.initialCooldownPeriod",
        "spec.advanced.restoreToOriginalReplicaCount",
    ):
        assert field in text, field


def test_idle_replica_count_zero_is_scale_to_zero() -> None:
    prom = {
        "type": "prometheus",
        "metadata": {"serverAddress": "http://p:9090", "query": "q", "threshold": "5"},
    }
    one = convert(so([prom], minReplicaCount=1, idleReplicaCount=0, cooldownPeriod=60))
    assert one.policy.spec.min_replicas == 0
    assert one.policy.spec.scale_to_zero is not None
    assert one.policy.spec.scale_to_zero.cooldown_seconds == 60
    assert not any("idleReplicaCount" in n for n in one.notes)  # exact for a floor of 1
    three = convert(so([prom], minReplicaCount=3, idleReplicaCount=0))
    assert any("spec.idleReplicaCount" in n and "floor" in n for n in three.notes)
    with pytest.raises(
        ConversionError, match="IdleReplicaCount=3 must be less than MinReplicaCount=3"
    ):
        convert(so([prom], minReplicaCount=3, idleReplicaCount=3))


@pytest.mark.parametrize("kind", ["cpu", "memory"])
def test_resource_only_triggers_with_min_zero_are_refused_as_keda_does(kind: str) -> None:
    trig = {"type": kind, "metricType": "Utilization", "metadata": {"value": "50"}}
    with pytest.raises(ConversionError, match="scale to zero doesn't work in this case"):
        convert(so([trig]))
    assert convert(so([trig], minReplicaCount=1)).policy.spec.min_replicas == 1


def test_paused_scale_in_and_out_disable_that_direction_only() -> None:
    prom = {
        "type": "prometheus",
        "metadata": {"serverAddress": "http://p:9090", "query": "q", "threshold": "5"},
    }
    scale_down = {"scaleDown": {"stabilizationWindowSeconds": 60}}
    r = convert(
        so(
            [prom],
            {"autoscaling.keda.sh/paused-scale-in": "true"},
            minReplicaCount=1,
            advanced={"horizontalPodAutoscalerConfig": {"behavior": scale_down}},
        )
    )
    b = r.policy.spec.behavior
    assert b is not None and b.scale_down is not None and b.scale_up is None
    assert (b.scale_down.select_policy, b.scale_down.stabilization_window_seconds) == (
        "Disabled",
        60,
    )
    assert r.policy.metadata.annotations == {}
    out = convert(so([prom], {"autoscaling.keda.sh/paused-scale-out": "true"}, minReplicaCount=1))
    assert out.policy.spec.behavior is not None and out.policy.spec.behavior.scale_up is not None
    assert out.policy.spec.behavior.scale_up.select_policy == "Disabled"
    paused = convert(so([prom], {"autoscaling.keda.sh/paused": "true"}, minReplicaCount=1))
    assert paused.policy.metadata.annotations == {"governor.dev/paused": "true"}
    unpaused = convert(so([prom], {"autoscaling.keda.sh/paused": "false"}, minReplicaCount=1))
    assert unpaused.policy.metadata.annotations == {}


def test_fallback_needs_an_average_value_trigger_as_keda_says() -> None:
    prom = {
        "type": "prometheus",
        "metricType": "Value",
        "metadata": {"serverAddress": "http://p:9090", "query": "q", "threshold": "5"},
    }
    cpu = {"type": "cpu", "metadata": {"value": "50"}}
    fb = {"failureThreshold": 3, "replicas": 6, "behavior": "currentReplicasIfHigher"}
    with pytest.raises(
        ConversionError, match="has to have the `AverageValue` type for the fallback"
    ):
        convert(so([prom, cpu], minReplicaCount=1, fallback=fb))
    prom["metricType"] = "AverageValue"
    f = convert(so([prom, cpu], minReplicaCount=1, fallback=fb)).policy.spec.fallback
    assert f is not None and (f.replicas, f.behavior, f.failure_threshold) == (
        6,
        "currentReplicasIfHigher",
        3,
    )


def test_scaling_modifiers_are_named_in_a_note() -> None:
    trig = {
        "type": "prometheus",
        "name": "a",
        "metadata": {"serverAddress": "http://p:9090", "query": "q", "threshold": "5"},
    }
    mods = {
        "formula": "a * 2",
        "target": "2",
        "activationTarget": "1",
        "metricType": "AverageValue",
    }
    r = convert(so([trig], minReplicaCount=1, advanced={"scalingModifiers": mods}))
    assert [m.name for m in r.policy.spec.metrics] == ["a"]
    assert any(n.startswith("spec.advanced.scalingModifiers: ") and "formula" in n for n in r.notes)
    with pytest.raises(ConversionError, match=r"ScalingModifiers\.Formula is mandatory"):
        convert(so([trig], minReplicaCount=1, advanced={"scalingModifiers": {"target": "2"}}))


def test_hpa_v2beta1_is_converted_as_the_api_server_does() -> None:
    v2beta1 = hpa(
        [
            {"type": "Resource", "resource": {"name": "cpu", "targetAverageUtilization": 70}},
            {"type": "Pods", "pods": {"metricName": "rps", "targetAverageValue": "500m"}},
            {
                "type": "Object",
                "object": {
                    "target": {"apiVersion": "v1", "kind": "Service", "name": "front"},
                    "metricName": "hits",
                    "targetValue": "2k",
                },
            },
            {
                "type": "External",
                "external": {
                    "metricName": "q",
                    "metricSelector": {"matchLabels": {"a": "b"}},
                    "targetAverageValue": 4,
                },
            },
        ],
        api="autoscaling/v2beta1",
    )
    ms = convert(v2beta1).policy.spec.metrics
    assert [m.name for m in ms] == ["cpu", "rps", "hits{object=Service/front}", "q{a=b}"]
    assert [m.target.type for m in ms] == ["Utilization", "AverageValue", "Value", "AverageValue"]
    assert [m.target.target_value() for m in ms] == [70, 0.5, 2000, 4]


def test_hpa_v1_target_cpu_and_annotations_as_the_api_server_does() -> None:
    v1 = {
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": "web",
            "annotations": {
                "autoscaling.alpha.kubernetes.io/metrics": json.dumps(
                    [{"type": "Pods", "pods": {"metricName": "rps", "targetAverageValue": "10"}}]
                ),
                "autoscaling.alpha.kubernetes.io/behavior": json.dumps(
                    {"scaleDown": {"selectPolicy": "Disabled"}}
                ),
            },
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "maxReplicas": 4,
            "targetCPUUtilizationPercentage": 65,
        },
    }
    r = convert(v1)
    assert [(m.name, m.target.target_value()) for m in r.policy.spec.metrics] == [
        ("rps", 10),
        ("cpu", 65),
    ]
    assert r.policy.spec.min_replicas == 1
    assert r.policy.spec.behavior is not None and r.policy.spec.behavior.scale_down is not None
    assert r.policy.spec.behavior.scale_down.select_policy == "Disabled"
    assert not any("annotations" in n for n in r.notes)  # both annotations converted


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            {"minReplicas": 0},
            "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1",
        ),
        (
            {"maxReplicas": 1},
            "spec.maxReplicas: Invalid value: 1: must be greater than or equal to `minReplicas`",
        ),
        ({"scaleTargetRef": {"name": "web"}}, "spec.scaleTargetRef.kind: Required value"),
    ],
)
def test_what_the_api_server_rejects_is_refused_with_its_reason(change: dict, reason: str) -> None:
    doc = hpa([container_cpu("app", 50)])
    doc["spec"].update(change)
    with pytest.raises(ConversionError) as err:
        convert(doc)
    assert str(err.value).startswith(reason)


def test_resource_target_value_is_refused_as_the_api_server_does() -> None:
    m = {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Value", "value": "1"}}}
    with pytest.raises(
        ConversionError, match=r"resource\.target\.type: Unsupported value: 'Value'"
    ):
        convert(hpa([m]))


def test_a_multi_document_file_converts_and_skips_one_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prom = {
        "type": "prometheus",
        "metadata": {"serverAddress": "http://p:9090", "query": "q", "threshold": "5"},
    }
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "worker"}}
    f = tmp_path / "all.yaml"
    f.write_text(yaml.safe_dump_all([secret, so([prom], minReplicaCount=1), deploy]))
    result = governor(capsys, ["import", str(f)])
    assert result.code == 0, result.output
    assert result.output.count("skipped (not an autoscaler)") == 2
    assert "kind: ScalingPolicy" in result.output


def test_exit_1_only_when_nothing_converted_and_strict_makes_notes_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sqs = {"type": "aws-sqs-queue", "metadata": {"queueURL": "q", "queueLength": "5"}}
    nothing = tmp_path / "sqs.yaml"
    nothing.write_text(yaml.safe_dump(so([sqs], minReplicaCount=1)))
    r = governor(capsys, ["import", str(nothing)])
    assert r.code == 1 and "refused" in r.output and "aws-sqs-queue" in r.output
    clean = tmp_path / "clean.yaml"
    clean.write_text(
        yaml.safe_dump(
            hpa(
                [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 50},
                        },
                    }
                ]
            )
        )
    )
    assert governor(capsys, ["import", "--strict", str(clean)]).code == 0
    noted = tmp_path / "noted.yaml"
    noted.write_text(yaml.safe_dump(hpa([container_cpu("app", 50)])))
    assert governor(capsys, ["import", str(noted)]).code == 0
    assert governor(capsys, ["import", "--strict", str(noted)]).code == 1


def test_kubectl_get_lists_are_converted_item_by_item() -> None:
    cpu = {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
    }
    a = hpa([cpu])
    b = {**hpa([cpu]), "metadata": {"name": "api", "namespace": "shop", "uid": "x-1"}}
    listed = {"apiVersion": "v1", "kind": "List", "items": [a, b], "metadata": {}}
    typed = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscalerList",
        "items": [{k: v for k, v in a.items() if k not in ("apiVersion", "kind")}],
    }
    got = convert_documents([listed, typed])
    assert [(o.kind, o.name, o.status) for o in got] == [
        ("HorizontalPodAutoscaler", "web", "converted"),
        ("HorizontalPodAutoscaler", "api", "converted"),
        ("HorizontalPodAutoscaler", "web", "converted"),
    ]
    assert got[1].conversion is not None
    assert any(n.startswith("metadata.uid: ") for n in got[1].conversion.notes)


@pytest.mark.parametrize(
    ("kind", "api", "why"),
    [
        ("ScaledJob", "keda.sh/v1alpha1", "a Job per batch"),
        ("VerticalPodAutoscaler", "autoscaling.k8s.io/v1", "vertical"),
    ],
)
def test_autoscalers_without_a_counterpart_are_refused_not_skipped(
    kind: str, api: str, why: str
) -> None:
    (o,) = convert_documents([{"apiVersion": api, "kind": kind, "metadata": {"name": "x"}}])
    assert o.status == "refused" and why in o.reason


def test_a_wrong_type_is_refused_naming_the_field() -> None:
    doc = hpa([container_cpu("app", 50)])
    doc["spec"]["minReplicas"] = "2"
    with pytest.raises(ConversionError, match=r"^spec\.minReplicas: expected int, got str"):
        convert(doc)
    keda = so([{"type": "cron", "metadata": ["not", "a", "map"]}], minReplicaCount=1)
    with pytest.raises(ConversionError, match=r"^spec\.triggers\[0\]\.metadata: expected object"):
        convert(keda)
