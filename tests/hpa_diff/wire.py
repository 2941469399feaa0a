"""The hpa-diff harness's JSON protocol (main.go), as msgspec types."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

PodPhase = Literal["Running", "Pending", "Failed"]


class _Wire(msgspec.Struct, rename="camel", frozen=True):
    pass


class PodMetric(_Wire, frozen=True):
    """One pod's sample of one metric: a milli-value, its age and window at the step."""

    value: int
    ago_seconds: float = 0.0
    window_seconds: float = 30.0


class Pod(_Wire, frozen=True):
    """`ready` is the Ready condition ("True", "False", "" for none); started_ago < 0: no start."""

    name: str
    phase: PodPhase
    ready: str = ""
    started_ago: float = -1.0
    transition_ago: float = 0.0
    deleting: bool = False
    requests: dict[str, int] = msgspec.field(default_factory=dict)
    metrics: dict[str, PodMetric] = msgspec.field(default_factory=dict)


class Step(_Wire, frozen=True):
    at: int  # unix milliseconds
    spec_replicas: int
    status_replicas: int
    pods: list[Pod] = msgspec.field(default_factory=list)
    # A None value makes the metrics API fail for that metric.
    external: dict[str, int | None] = msgspec.field(default_factory=dict)
    object: dict[str, int | None] = msgspec.field(default_factory=dict)


class Setup(_Wire, frozen=True):
    hpa: dict[str, Any]  # an autoscaling/v2 HorizontalPodAutoscalerSpec (without scaleTargetRef)
    tolerance: float = 0.1
    downscale_window_seconds: int = 300
    cpu_initialization_seconds: int = 300
    readiness_delay_seconds: int = 30


class Sync(msgspec.Struct, frozen=True):
    case: int
    step: Step
    setup: Setup | None = None


class Request(msgspec.Struct, frozen=True):
    syncs: list[Sync]


class Synced(msgspec.Struct, frozen=True):
    case: int
    desired: int
    error: str = ""


class Response(msgspec.Struct, frozen=True):
    features: dict[str, bool]
    results: list[Synced]
