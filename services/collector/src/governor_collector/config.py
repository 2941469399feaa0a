"""The collector's typed configuration (`governor.settings`): defaults, then the YAML/JSON file
named by `GOVERNOR_COLLECTOR_CONFIG`, then `GOVERNOR_COLLECTOR_<FIELD>` environment variables
(nested with `__`: `GOVERNOR_COLLECTOR_KAFKA__BOOTSTRAP=127.0.0.1:9092`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import msgspec

from governor.events import METRICS, POLICIES, MetricSample, PolicyRecord, Topic
from governor.settings import KafkaSettings, load_settings

PREFIX = "GOVERNOR_COLLECTOR"


class CollectorSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    kafka: KafkaSettings = msgspec.field(
        default_factory=lambda: KafkaSettings(client_id="governor-collector")
    )
    # HTTP: /metrics, /healthz, /readyz and POST /v1/samples
    http_host: str = "0.0.0.0"
    http_port: int = 8080
    push_max_body_bytes: int = 1024 * 1024
    # Who may push (governor_collector.sources.push): `kubernetes` = TokenReview +
    # SubjectAccessReview on the API server (`kubeconfig`), `tokens_file` = `push_tokens_file`
    # maps tokens to namespaces, `none` = anyone (local play only).
    push_auth: Literal["none", "kubernetes", "tokens_file"] = "none"
    push_tokens_file: str | None = None
    # TokenReview audiences the tokens must carry (empty: the API server's own).
    push_token_audiences: list[str] = msgspec.field(default_factory=list)
    # TLS on the HTTP port (push, metrics, health): both files (PEM), or neither.
    http_tls_cert_file: str | None = None
    http_tls_key_file: str | None = None
    log_level: str = "INFO"
    # The resource source's Kubernetes client: a kubeconfig path, else in-cluster config.
    kubeconfig: str | None = None
    # SIGTERM: how long in-flight pushes and polls may take to finish before being cut.
    shutdown_timeout_seconds: float = 10.0
    # How long to wait for Kafka at start before giving up.
    start_timeout_seconds: float = 60.0
    # Topic names (the contract's by default; other names for tests or a shared broker).
    metrics_topic: str = METRICS.name
    policies_topic: str = POLICIES.name
    # Collectors with the same group split the pull sources (topic governor.collector-sources).
    group_id: str = "governor-collector"

    def topics(self) -> tuple[Topic[MetricSample], Topic[PolicyRecord]]:
        """The metrics and policies topics, renamed as configured (same types and keys)."""
        return (
            dataclasses.replace(METRICS, name=self.metrics_topic),
            dataclasses.replace(POLICIES, name=self.policies_topic),
        )

    def __post_init__(self) -> None:
        if self.push_max_body_bytes <= 0:
            raise ValueError("push_max_body_bytes: must be > 0")
        if self.push_auth == "tokens_file" and not self.push_tokens_file:
            raise ValueError("push_tokens_file: push_auth tokens_file needs the file's path")
        if (self.http_tls_cert_file is None) != (self.http_tls_key_file is None):
            raise ValueError("http_tls_cert_file and http_tls_key_file: set both, or neither")
        if not 0 <= self.http_port <= 65535:
            raise ValueError(f"http_port: must be in 0..65535, got {self.http_port}")


def load(env: Mapping[str, str] | None = None, file: Path | None = None) -> CollectorSettings:
    return load_settings(CollectorSettings, PREFIX, env=env, file=file)
