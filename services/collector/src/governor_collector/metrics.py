"""The collector's own Prometheus metrics (served on /metrics)."""

from __future__ import annotations

import contextlib

from prometheus_client import Counter, Gauge, Histogram

SOURCE_UP = Gauge(
    "governor_collector_source_up",
    "1 when the source's last poll produced samples (push: the metric is expected), 0 when it "
    "failed; removed when the source stops.",
    ["source", "workload", "metric"],
)
SOURCE_ERRORS = Counter(
    "governor_collector_source_errors",
    "Failed polls (and failed publishes), by source and reason.",
    ["source", "reason"],
)
SAMPLES = Counter(
    "governor_collector_samples_published",
    "Samples acknowledged by Kafka, by source.",
    ["source"],
)
POLL_SECONDS = Histogram(
    "governor_collector_source_poll_duration_seconds",
    "Time of one poll of a pull source, publishing included.",
    ["source"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
SOURCES_RUNNING = Gauge(
    "governor_collector_sources_running", "Source instances running, by source.", ["source"]
)
POLICIES = Gauge("governor_collector_policies", "ScalingPolicies in the collector's table.")
POLICY_ERRORS = Counter(
    "governor_collector_policy_errors",
    "Policy records skipped (undecodable) or metrics not started (conflict, unknown source).",
    ["reason"],
)
PUSH_REQUESTS = Counter(
    "governor_collector_push_requests", "POST /v1/samples requests, by status code.", ["code"]
)
PUSH_DENIALS = Counter(
    "governor_collector_push_denials",
    "POST /v1/samples requests refused by authentication or authorization, by reason "
    "(missing_token, invalid_token, forbidden, auth_unavailable).",
    ["reason"],
)
PUSH_LAST_SAMPLE = Gauge(
    "governor_collector_push_last_sample_timestamp_seconds",
    "When the newest pushed sample of an expected (workload, metric) arrived.",
    ["workload", "metric"],
)


def remove_up(source: str, workload: str, metric: str) -> None:
    with contextlib.suppress(KeyError):
        SOURCE_UP.remove(source, workload, metric)


def remove_push_last(workload: str, metric: str) -> None:
    with contextlib.suppress(KeyError):
        PUSH_LAST_SAMPLE.remove(workload, metric)
