"""The policies a simulation compares: governor's default, the reference HPA, and user files."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import msgspec

from governor.spec import (
    Behavior,
    HPAScalingPolicy,
    HPAScalingRules,
    MetricSpec,
    MetricTarget,
    ScalingPolicy,
    ScalingPolicySpec,
    TargetRef,
    policies_from_yaml,
)
from governor_tools.sim.replay import METRIC, Pipeline, SimConfig, SimError

HPA_SYNC_SECONDS = 15.0
HPA_MAX_REPLICAS = 1000

# What the API server fills into an autoscaling/v2 HPA without `behavior`
# (SetDefaults_HorizontalPodAutoscalerBehavior); spelled out so the baseline does not depend on
# the policy engine's own defaults.
HPA_DEFAULT_BEHAVIOR = Behavior(
    scale_up=HPAScalingRules(
        stabilization_window_seconds=0,
        select_policy="Max",
        policies=[
            HPAScalingPolicy(type="Percent", value=100, period_seconds=15),
            HPAScalingPolicy(type="Pods", value=4, period_seconds=15),
        ],
    ),
    scale_down=HPAScalingRules(
        stabilization_window_seconds=300,
        select_policy="Max",
        policies=[HPAScalingPolicy(type="Percent", value=100, period_seconds=15)],
    ),
)

# The reference HPA's view of the metric: an external metric averaged over one sync period and
# one scrape old when the controller reads it.
HPA_PIPELINE = Pipeline(stable_seconds=HPA_SYNC_SECONDS, delay_seconds=HPA_SYNC_SECONDS)


def load_target(config: SimConfig) -> MetricTarget:
    return MetricTarget(
        type="AverageValue",
        average_value=config.target_utilization * config.capacity_per_replica,
    )


def hpa_policy(config: SimConfig) -> ScalingPolicySpec:
    """The reference HPA: autoscaling/v2 defaults, External AverageValue target, min 1."""
    return ScalingPolicySpec(
        target_ref=TargetRef(kind="Deployment", name="workload"),
        min_replicas=1,
        max_replicas=HPA_MAX_REPLICAS,
        metrics=[MetricSpec(name=METRIC, target=load_target(config))],
        behavior=HPA_DEFAULT_BEHAVIOR,
    )


def default_policy_yaml() -> str:
    return resources.files("governor_tools.sim").joinpath("default_policy.yaml").read_text("utf-8")


def default_policy(config: SimConfig) -> ScalingPolicy:
    """governor's out-of-the-box policy with its load target set from the simulation's C and u."""
    (policy,) = policies_from_yaml(default_policy_yaml())
    return with_load_target(policy, load_target(config))


def with_load_target(policy: ScalingPolicy, target: MetricTarget) -> ScalingPolicy:
    metrics = [
        msgspec.structs.replace(m, target=target) if m.name == METRIC else m
        for m in policy.spec.metrics
    ]
    spec = msgspec.structs.replace(policy.spec, metrics=metrics)
    return msgspec.structs.replace(policy, spec=spec)


def policies_from_file(path: Path) -> list[ScalingPolicy]:
    if not path.is_file():
        raise SimError(f"{path}: no such policy file")
    found = policies_from_yaml(path.read_text("utf-8"))
    if not found:
        raise SimError(f"{path}: no ScalingPolicy in it")
    return found
