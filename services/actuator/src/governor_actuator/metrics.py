"""The actuator's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

ACTUATIONS = Counter(
    "governor_actuator_actuations",
    "Decisions handled, by outcome (applied, noop, replay, refused, failed, dry_run) and reason "
    "(the refusal code, the failure, or the decision's binding rule).",
    ["outcome", "reason"],
)
DECISION_TO_PATCH = Histogram(
    "governor_actuator_decision_to_patch_seconds",
    "From the decision's decided_at to the API server's answer to its patch.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
STATUS_ERRORS = Counter(
    "governor_actuator_status_write_errors",
    "ScalingPolicy status writes that failed after retries.",
)
EVENTS_DROPPED = Counter(
    "governor_actuator_events_dropped",
    "Kubernetes Events not created because the event queue was full.",
)
KUBE_ERRORS = Counter(
    "governor_actuator_kube_errors",
    "API server errors by HTTP status (0: no answer), including the ones retried.",
    ["code"],
)
