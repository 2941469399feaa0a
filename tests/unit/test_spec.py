"""ScalingPolicy validation: good input round-trips, bad input names the field and the fix."""

from pathlib import Path

import msgspec
import pytest

from governor.spec import (
    EventReductionSpec,
    ForecastSpec,
    PolicyError,
    ScalingPolicy,
    ScalingPolicySpec,
    hpa_compatible,
    policies_from_yaml,
    policy_from_obj,
)
from tests.support.policies import policy_obj

EXAMPLE = Path(__file__).parents[2] / "examples" / "web-policy.yaml"

# The behavior block of the HPA documentation's "default behavior" example, verbatim.
HPA_BEHAVIOR = """
behavior:
  scaleDown:
    stabilizationWindowSeconds: 300
    policies:
    - type: Percent
      value: 100
      periodSeconds: 15
  scaleUp:
    stabilizationWindowSeconds: 0
    policies:
    - type: Percent
      value: 100
      periodSeconds: 15
    - type: Pods
      value: 4
      periodSeconds: 15
    selectPolicy: Max
"""


def _base() -> dict:
    return policy_obj(
        "p",
        "ns",
        {
            "targetRef": {"kind": "Deployment", "name": "web"},
            "maxReplicas": 10,
            "metrics": [{"name": "rps", "target": {"type": "AverageValue", "averageValue": 5}}],
        },
    )


def test_example_file_parses_and_round_trips() -> None:
    (policy,) = policies_from_yaml(EXAMPLE.read_text())
    assert policy.workload == "shop/Deployment/web"
    again = msgspec.json.decode(msgspec.json.encode(policy), type=ScalingPolicy)
    assert again == policy


def test_pasted_hpa_behavior_is_accepted_unchanged() -> None:
    import yaml

    obj = _base()
    obj["spec"].update(yaml.safe_load(HPA_BEHAVIOR))
    policy = policy_from_obj(obj)
    assert policy.spec.behavior is not None
    up = policy.spec.behavior.scale_up
    assert up is not None and up.select_policy == "Max"
    assert [(p.type, p.value, p.period_seconds) for p in up.policies or []] == [
        ("Percent", 100, 15),
        ("Pods", 4, 15),
    ]
    encoded = msgspec.to_builtins(policy)
    assert encoded["spec"]["behavior"] == yaml.safe_load(HPA_BEHAVIOR)["behavior"]


@pytest.mark.parametrize(
    ("patch", "path", "says"),
    [
        ({"maxReplicas": 0}, "spec.maxReplicas", ">= minReplicas"),
        ({"minReplicas": 0}, "spec.minReplicas", "scaleToZero"),
        ({"maxReplicas": "ten"}, "spec.maxReplicas", "Expected `int`"),
        ({"metrics": []}, "spec.metrics", "at least one"),
        (
            {"metrics": [{"name": "a", "target": {"type": "Value"}}]},
            "spec.metrics[0].target.value",
            "required for target type Value",
        ),
        (
            {
                "behavior": {
                    "scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 9999}]}
                }
            },
            "spec.behavior.scaleUp.policies[0].periodSeconds",
            "1..1800",
        ),
        (
            {"behavior": {"scaleDown": {"selectPolicy": "Sometimes"}}},
            "spec.behavior.scaleDown.selectPolicy",
            "Max",
        ),
        ({"fallback": {"replicas": 3}}, "spec.fallback", "failureThreshold"),
        ({"fallback": {"replicas": 30, "failureThreshold": 3}}, "spec.fallback.replicas", "within"),
        ({"panic": {"thresholdPercent": 50}}, "spec.panic.thresholdPercent", "> 100"),
        (
            {"panic": {"stableWindowSeconds": 601}},
            "spec.panic.stableWindowSeconds",
            "must be <= 600",
        ),
        ({"minReplcas": 2}, "spec", "unknown field `minReplcas`"),
    ],
)
def test_invalid_policy_names_field_and_fix(patch: dict, path: str, says: str) -> None:
    obj = _base()
    obj["spec"].update(patch)
    with pytest.raises(PolicyError) as err:
        policy_from_obj(obj)
    assert err.value.path == path
    assert says in err.value.problem


def test_yaml_error_names_the_policy() -> None:
    text = EXAMPLE.read_text().replace("maxReplicas: 40", "maxReplicas: 1")
    with pytest.raises(PolicyError, match=r"^web: spec.maxReplicas"):
        policies_from_yaml(text)


def test_hpa_compatible_switches_off_forecast_and_event_reduction_only() -> None:
    base = msgspec.convert(
        {
            "targetRef": {"kind": "Deployment", "name": "web"},
            "maxReplicas": 5,
            "metrics": [{"name": "q", "target": {"type": "Value", "value": 10}}],
            "panic": {},
        },
        ScalingPolicySpec,
    )
    assert hpa_compatible(base) is base  # nothing to switch off
    spec = msgspec.structs.replace(
        base, forecast=ForecastSpec(horizon_seconds=90.0), event_reduction=EventReductionSpec()
    )
    out = hpa_compatible(spec)
    assert out.forecast == ForecastSpec(enabled=False, horizon_seconds=90.0)
    assert out.event_reduction == EventReductionSpec(enabled=False)
    assert out.panic == base.panic  # governor's other additions stay as set
    assert spec.forecast is not None and spec.forecast.enabled  # the input is not changed
