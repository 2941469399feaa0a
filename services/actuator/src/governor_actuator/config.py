"""The actuator's configuration: defaults, then the file in `GOVERNOR_ACTUATOR_CONFIG` (or
`--config`), then `GOVERNOR_ACTUATOR_<FIELD>` variables (see governor.settings).

Example (deploy/k8s/base/config/actuator.yaml)::

    allowed_namespaces: [default, ml]
    allowed_kinds: [Deployment.apps, StatefulSet.apps, Job.batch.volcano.sh,
                    PyTorchJob.kubeflow.org]
    dry_run: false
    kafka: {bootstrap: "kafka.governor-system:9092"}
"""

from __future__ import annotations

import msgspec

from governor.policy.actuation import ActuatorRules
from governor.settings import KafkaSettings

PREFIX = "GOVERNOR_ACTUATOR"

DEFAULT_KINDS = [
    "Deployment.apps",
    "StatefulSet.apps",
    "Job.batch.volcano.sh",
    "PyTorchJob.kubeflow.org",
]


class HttpSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    host: str = "0.0.0.0"
    port: int = 8080


class ActuatorSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    kafka: KafkaSettings = msgspec.field(default_factory=KafkaSettings)
    group_id: str = "governor-actuator"
    decisions_topic: str = "governor.decisions"
    actuations_topic: str = "governor.actuations"
    # None: in-cluster ServiceAccount, else $KUBECONFIG / ~/.kube/config.
    kubeconfig: str | None = None
    # Namespaces the actuator may write to ("*": all; RBAC still applies). Empty: none.
    allowed_namespaces: list[str] = msgspec.field(default_factory=list)
    # Target kinds as Kind.group.
    allowed_kinds: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_KINDS))
    # Server-side dry run: patches are validated by the API server but not persisted.
    dry_run: bool = False
    # Client-side QPS budgets, and retries on 429/5xx/no answer: `qps` for what decisions need
    # (reads, the fenced patch), `side_qps` for ScalingPolicy status and Events (coalesced or
    # queued when over budget). The API server sees at most qps + side_qps from the actuator.
    qps: float = 50.0
    burst: int = 100
    side_qps: float = 20.0
    side_burst: int = 40
    max_retries: int = 5
    request_timeout_seconds: float = 15.0
    # How long a ScalingPolicy and a namespace's HPA/ScaledObject lists are reused.
    policy_ttl_seconds: float = 5.0
    owner_ttl_seconds: float = 5.0
    # Attempts when the fence's `test` fails (another writer moved the seq in between).
    fence_attempts: int = 3
    # Decisions read ahead into the per-workload lanes, and the longest time between commits.
    max_in_flight: int = 1000
    commit_interval_seconds: float = 2.0
    events: bool = True
    # Events wait here for the background writers; when full, new ones are dropped (counted).
    event_queue_size: int = 1000
    # Status and Event writers wait up to this long for in-flight decisions to finish first.
    writer_yield_s: float = 1.0
    write_status: bool = True
    field_manager: str = "governor-actuator"
    http: HttpSettings = msgspec.field(default_factory=HttpSettings)
    log_level: str = "INFO"

    def rules(self) -> ActuatorRules:
        return ActuatorRules(
            allowed_namespaces=frozenset(self.allowed_namespaces),
            allowed_kinds=frozenset(self.allowed_kinds),
        )
