"""ScalingPolicy: the user-facing configuration, one shape for the CRD, YAML files and the topic.

The shape is the `governor.dev/v1alpha1` ScalingPolicy object (apiVersion, kind, metadata, spec)
so a file applied with `governor policies apply` and an object in the cluster are the same thing.
Field names are camelCase, as in Kubernetes; `behavior` is HPA's `autoscaling/v2` block verbatim so
users can paste theirs.

Validation happens in two layers: msgspec checks types (its errors carry the JSON path), and
`__post_init__` checks cross-field rules, raising `PolicyError` with the field path and the fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

# The base of every section and the error live in spec_base.py, so that sections can live
# beside this module (spec_forecast.py) and still be re-exported from here.
from governor.spec_base import PolicyError
from governor.spec_base import Spec as _Spec
from governor.spec_forecast import EventReductionSpec, ForecastSpec
from governor.window_sizes import check_panic

API_VERSION = "governor.dev/v1alpha1"
KIND = "ScalingPolicy"

# HPA's limits (autoscaling/v2 validation): periodSeconds in (0, 1800], window in [0, 3600].
MAX_PERIOD_SECONDS = 1800
MAX_WINDOW_SECONDS = 3600


__all__ = ["EventReductionSpec", "ForecastSpec", "PolicyError"]


# --- target -----------------------------------------------------------------------------------


class TargetRef(_Spec):
    kind: str
    name: str
    api_version: str = "apps/v1"
    # For a CRD with a scale subresource: its specReplicasPath (JSON pointer or .dotted path).
    spec_replicas_path: str | None = None
    # For a Volcano Job: the task whose replicas are scaled.
    task: str | None = None
    # Volcano Job: also move /spec/minAvailable with the floor.
    scale_min_available: bool = False


# --- metrics ----------------------------------------------------------------------------------


class PrometheusSource(_Spec, tag="prometheus", tag_field="type"):
    query: str
    server_address: str = "http://127.0.0.1:9090"
    interval_seconds: float = 15.0


class KafkaLagSource(_Spec, tag="kafka_lag", tag_field="type"):
    topic: str
    consumer_group: str
    bootstrap_servers: str = "127.0.0.1:9092"
    lag_threshold: int = 10
    activation_lag_threshold: int = 0
    offset_reset_policy: Literal["latest", "earliest"] = "latest"
    allow_idle_consumers: bool = False
    exclude_persistent_lag: bool = False
    limit_to_partitions_with_lag: bool = False
    interval_seconds: float = 15.0


class ResourceSource(_Spec, tag="resource", tag_field="type"):
    resource: Literal["cpu", "memory"]
    selector: str | None = None
    interval_seconds: float = 15.0


class PushSource(_Spec, tag="push", tag_field="type"):
    """Samples arrive by HTTP push or are produced to the metrics topic by the app itself."""


# KEDA's most used scalers, with KEDA's field names so a trigger's metadata reads the same. Each
# publishes a total (an AverageValue target divides it by the replicas, as KEDA's targets do).


def _one_of(spec: object, a: str, b: str, va: object, vb: object) -> None:
    if (va is None) == (vb is None):
        raise PolicyError(a, f"set exactly one of {a} and {b} ({type(spec).__name__})")


class CronSource(_Spec, tag="cron", tag_field="type"):
    """KEDA `cron`: `desiredReplicas` between `start` and `end` (cron expressions in `timezone`),
    0 outside; no I/O."""

    timezone: str
    start: str
    end: str
    desired_replicas: int
    interval_seconds: float = 15.0

    def __post_init__(self) -> None:
        from governor.policy.cron import check_cron

        check_cron(self)


class MetricsApiSource(_Spec, tag="metrics_api", tag_field="type"):
    """KEDA `metrics-api`: GET `url`, the number at `valueLocation` (dotted path, list indices as
    numbers) of the JSON body."""

    url: str
    value_location: str
    # Names of environment variables of the collector holding credentials (never the secrets).
    auth_mode: Literal["none", "bearer", "basic", "apiKey"] = "none"
    token_from_env: str | None = None
    username_from_env: str | None = None
    password_from_env: str | None = None
    api_key_from_env: str | None = None
    key_param_name: str = "X-API-KEY"
    method: Literal["header", "query"] = "header"
    interval_seconds: float = 15.0

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise PolicyError("url", f"must be an http:// or https:// URL, got {self.url!r}")
        if not self.value_location.strip():
            raise PolicyError("valueLocation", "must name the value, e.g. components.worker.tasks")


class KubernetesWorkloadSource(_Spec, tag="kubernetes_workload", tag_field="type"):
    """KEDA `kubernetes-workload`: how many pods in the policy's namespace match `podSelector`
    (pods Succeeded or Failed are not counted)."""

    pod_selector: str
    interval_seconds: float = 15.0

    def __post_init__(self) -> None:
        if not self.pod_selector.strip():
            raise PolicyError("podSelector", "must be a label selector, e.g. app=backend")


class RabbitMQSource(_Spec, tag="rabbitmq", tag_field="type"):
    """KEDA `rabbitmq` over the management HTTP API: a queue's length or its publish rate."""

    queue_name: str
    # http(s)://[user:pass@]host:15672[/vhost]; or the name of a collector env var holding it.
    host: str | None = None
    host_from_env: str | None = None
    vhost_name: str | None = None
    mode: Literal["QueueLength", "MessageRate"] = "QueueLength"
    use_regex: bool = False
    operation: Literal["sum", "max", "avg"] = "sum"
    exclude_unacknowledged: bool = False
    username_from_env: str | None = None
    password_from_env: str | None = None
    interval_seconds: float = 15.0

    def __post_init__(self) -> None:
        _one_of(self, "host", "hostFromEnv", self.host, self.host_from_env)


def rabbitmq_management_url(host: str) -> str:
    """RabbitMQ's management API for a KEDA `host`: an amqp(s):// URL becomes http(s):// on the
    management port (15672, 15671 with TLS) with the same credentials and vhost path; http(s)
    URLs are kept. ValueError for anything else."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(host)
    if parts.scheme in ("http", "https"):
        return host
    if parts.scheme not in ("amqp", "amqps"):
        raise ValueError(f"rabbitmq host {host!r}: expected amqp://, amqps://, http:// or https://")
    secure = parts.scheme == "amqps"
    userinfo, _, hostport = parts.netloc.rpartition("@")
    hostname = hostport.rsplit(":", 1)[0] if ":" in hostport else hostport
    netloc = f"{userinfo + '@' if userinfo else ''}{hostname}:{15671 if secure else 15672}"
    return urlunsplit(("https" if secure else "http", netloc, parts.path, "", ""))


class RedisConnection(_Spec, kw_only=True):
    """The server a `redis` or `redis_streams` source reads, as KEDA's two Redis scalers name it
    (serialized after each source's own fields)."""

    address: str | None = None  # host:port
    address_from_env: str | None = None
    database_index: int = 0
    enable_tls: bool = False
    username_from_env: str | None = None
    password_from_env: str | None = None
    interval_seconds: float = 15.0

    def __post_init__(self) -> None:
        _one_of(self, "address", "addressFromEnv", self.address, self.address_from_env)


class RedisSource(RedisConnection, tag="redis", tag_field="type"):
    """KEDA `redis`: the length of a list (`listName`) or the number in a key (`keyName`)."""

    list_name: str | None = None
    key_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of(self, "listName", "keyName", self.list_name, self.key_name)


class RedisStreamsSource(RedisConnection, tag="redis_streams", tag_field="type"):
    """KEDA `redis-streams`: a consumer group's pending entries (XPENDING), its lag (XINFO GROUPS,
    Redis 7+) or the stream's length (XLEN)."""

    stream: str
    measure: Literal["pendingEntries", "lag", "streamLength"] = "pendingEntries"
    consumer_group: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.measure != "streamLength" and not self.consumer_group:
            raise PolicyError("consumerGroup", f"required for measure {self.measure}")


MetricSource = (
    PrometheusSource
    | KafkaLagSource
    | ResourceSource
    | PushSource
    | CronSource
    | MetricsApiSource
    | KubernetesWorkloadSource
    | RabbitMQSource
    | RedisSource
    | RedisStreamsSource
)

TargetType = Literal["Utilization", "Value", "AverageValue"]


class MetricTarget(_Spec):
    type: TargetType
    value: float | None = None
    average_value: float | None = None
    average_utilization: float | None = None

    def target_value(self) -> float:
        """The number the observed metric is compared with, whatever the type."""
        chosen = {
            "Utilization": self.average_utilization,
            "Value": self.value,
            "AverageValue": self.average_value,
        }[self.type]
        assert chosen is not None  # guaranteed by MetricSpec.__post_init__
        return chosen


class MetricSpec(_Spec):
    name: str
    target: MetricTarget
    source: MetricSource = msgspec.field(default_factory=PushSource)
    # Which window statistic drives scaling: the window mean (HPA-like) or its max/p95.
    aggregation: Literal["mean", "max", "p95"] = "mean"

    def __post_init__(self) -> None:
        field = {
            "Utilization": "averageUtilization",
            "Value": "value",
            "AverageValue": "averageValue",
        }[self.target.type]
        chosen = {
            "Utilization": self.target.average_utilization,
            "Value": self.target.value,
            "AverageValue": self.target.average_value,
        }[self.target.type]
        if chosen is None:
            raise PolicyError(f"target.{field}", f"required for target type {self.target.type}")
        if not chosen > 0 or math.isinf(chosen):
            raise PolicyError(f"target.{field}", f"must be a finite number > 0, got {chosen}")


# --- behavior (HPA autoscaling/v2, verbatim) ---------------------------------------------------


class HPAScalingPolicy(_Spec):
    type: Literal["Pods", "Percent"]
    value: int
    period_seconds: int

    def __post_init__(self) -> None:
        if self.value <= 0:
            raise PolicyError("value", f"must be > 0, got {self.value}")
        if not 0 < self.period_seconds <= MAX_PERIOD_SECONDS:
            raise PolicyError(
                "periodSeconds",
                f"must be in 1..{MAX_PERIOD_SECONDS}, got {self.period_seconds}",
            )


def _parse_quantity(value: float | str) -> float:
    """Kubernetes quantities as HPA's tolerance uses them: 0.1, "0.1", "100m"."""
    if isinstance(value, float | int):
        return float(value)
    text = value.strip()
    if text.endswith("m"):
        return float(text[:-1]) / 1000.0
    return float(text)


class HPAScalingRules(_Spec):
    stabilization_window_seconds: int | None = None
    select_policy: Literal["Max", "Min", "Disabled"] | None = None
    policies: list[HPAScalingPolicy] | None = None
    tolerance: float | str | None = None

    def __post_init__(self) -> None:
        w = self.stabilization_window_seconds
        if w is not None and not 0 <= w <= MAX_WINDOW_SECONDS:
            raise PolicyError(
                "stabilizationWindowSeconds", f"must be in 0..{MAX_WINDOW_SECONDS}, got {w}"
            )
        if self.tolerance is not None:
            try:
                tol = _parse_quantity(self.tolerance)
            except ValueError:
                raise PolicyError(
                    "tolerance",
                    f"must be a number or quantity like 0.1 or 100m, got {self.tolerance!r}",
                ) from None
            if not 0 <= tol < 1:
                raise PolicyError("tolerance", f"must be in [0, 1), got {tol}")

    def tolerance_value(self) -> float | None:
        return None if self.tolerance is None else _parse_quantity(self.tolerance)


class Behavior(_Spec):
    scale_up: HPAScalingRules | None = None
    scale_down: HPAScalingRules | None = None


# --- governor's additions ---------------------------------------------------------------------


class PanicSpec(_Spec):
    """Knative KPA panic mode: a short window watched against the stable one."""

    window_seconds: float = 6.0
    stable_window_seconds: float = 60.0
    threshold_percent: float = 200.0


class ScaleToZeroSpec(_Spec):
    """KEDA-style: 0 -> 1 once load exceeds the activation threshold, back to 0 after cooldown."""

    activation_threshold: float = 0.0
    cooldown_seconds: float = 300.0
    # KEDA's initialCooldownPeriod: a new policy (no activity seen yet) waits the longer of this
    # and cooldownSeconds before it scales to zero.
    initial_cooldown_seconds: float | None = None


class FallbackSpec(_Spec):
    """KEDA fallback: what to do once metric data has been missing or stale long enough."""

    replicas: int
    failure_threshold: int | None = None
    stale_after_seconds: float | None = None
    behavior: Literal[
        "static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower"
    ] = "static"


class ElasticSpec(_Spec):
    """An elastic training job: every resize restarts its workers from a checkpoint."""

    floor: int = 1
    restart_penalty_seconds: float = 30.0
    scaling_efficiency: float = 0.9
    min_resize_interval_seconds: float = 300.0


class ScalingPolicySpec(_Spec):
    target_ref: TargetRef
    max_replicas: int
    metrics: list[MetricSpec]
    min_replicas: int = 1
    behavior: Behavior | None = None
    panic: PanicSpec | None = None
    scale_to_zero: ScaleToZeroSpec | None = None
    fallback: FallbackSpec | None = None
    priority: int = 0
    weight: float = 1.0
    pool: str = "default"
    elastic: ElasticSpec | None = None
    # Optional hard cap, e.g. the partition count of a Kafka-lag consumer.
    replica_cap: int | None = None
    # governor's predictive additions; hpa_compatible() switches both off.
    forecast: ForecastSpec | None = None
    event_reduction: EventReductionSpec | None = None
    # Shadow: evaluated on the same live inputs as the target's Active policy, its decisions
    # published to governor.shadow-decisions and never actuated (governor.shadow).
    mode: Literal["Active", "Shadow"] = "Active"

    def __post_init__(self) -> None:
        _check_spec(self)


class ObjectMeta(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str
    namespace: str = "default"
    generation: int = 1
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    annotations: dict[str, str] = msgspec.field(default_factory=dict)
    resource_version: str | None = None
    uid: str | None = None


class ScalingPolicy(msgspec.Struct, rename="camel", omit_defaults=True):
    metadata: ObjectMeta
    spec: ScalingPolicySpec
    api_version: str = API_VERSION
    kind: str = KIND

    def __post_init__(self) -> None:
        if self.api_version != API_VERSION:
            raise PolicyError("apiVersion", f"must be {API_VERSION}, got {self.api_version!r}")
        if self.kind != KIND:
            raise PolicyError("kind", f"must be {KIND}, got {self.kind!r}")

    @property
    def workload(self) -> str:
        """The workload id this policy scales: namespace/kind/name of its target."""
        return f"{self.metadata.namespace}/{self.spec.target_ref.kind}/{self.spec.target_ref.name}"

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"


def _check_spec(spec: ScalingPolicySpec) -> None:
    if spec.min_replicas < 0:
        raise PolicyError("minReplicas", f"must be >= 0, got {spec.min_replicas}")
    if spec.min_replicas == 0 and spec.scale_to_zero is None:
        raise PolicyError(
            "minReplicas", "0 requires spec.scaleToZero (activation threshold and cooldown)"
        )
    if spec.max_replicas < max(1, spec.min_replicas):
        raise PolicyError(
            "maxReplicas",
            f"must be >= minReplicas ({spec.min_replicas}) and >= 1, got {spec.max_replicas}",
        )
    if not spec.metrics:
        raise PolicyError("metrics", "at least one metric is required")
    names = [m.name for m in spec.metrics]
    if len(set(names)) != len(names):
        raise PolicyError("metrics[].name", f"names must be unique, got {names}")
    if spec.weight <= 0:
        raise PolicyError("weight", f"must be > 0, got {spec.weight}")
    if spec.replica_cap is not None and spec.replica_cap < 1:
        raise PolicyError("replicaCap", f"must be >= 1, got {spec.replica_cap}")
    if spec.fallback is not None:
        fb = spec.fallback
        if fb.failure_threshold is None and fb.stale_after_seconds is None:
            raise PolicyError("fallback", "set failureThreshold (evaluations) or staleAfterSeconds")
        if fb.failure_threshold is not None and fb.failure_threshold < 1:
            raise PolicyError("fallback.failureThreshold", "must be >= 1")
        if fb.stale_after_seconds is not None and fb.stale_after_seconds <= 0:
            raise PolicyError("fallback.staleAfterSeconds", "must be > 0")
        if not spec.min_replicas <= fb.replicas <= spec.max_replicas:
            raise PolicyError(
                "fallback.replicas",
                f"must be within minReplicas..maxReplicas "
                f"({spec.min_replicas}..{spec.max_replicas}), got {fb.replicas}",
            )
    if spec.panic is not None:
        check_panic(spec.panic)  # with the aggregator's window limit
    if spec.scale_to_zero is not None:
        z = spec.scale_to_zero
        if z.cooldown_seconds < 0 or z.activation_threshold < 0:
            raise PolicyError("scaleToZero", "cooldownSeconds and activationThreshold >= 0")
        if z.initial_cooldown_seconds is not None and z.initial_cooldown_seconds < 0:
            raise PolicyError("scaleToZero.initialCooldownSeconds", "must be >= 0")
    if spec.elastic is not None:
        e = spec.elastic
        if not spec.min_replicas <= e.floor <= spec.max_replicas:
            raise PolicyError(
                "elastic.floor",
                f"must be within minReplicas..maxReplicas, got {e.floor}",
            )
        if not 0 < e.scaling_efficiency <= 1:
            raise PolicyError("elastic.scalingEfficiency", "must be in (0, 1]")
        if e.restart_penalty_seconds < 0 or e.min_resize_interval_seconds < 0:
            raise PolicyError("elastic", "restartPenaltySeconds/minResizeIntervalSeconds >= 0")
    # What the target's kind needs of its targetRef (a Volcano Job: its task).
    from governor.targets import kind_of  # not at the top: governor.targets imports this module

    missing = kind_of(spec.target_ref).missing(spec.target_ref)
    if missing is not None:
        raise PolicyError(*missing)


# The switches of governor's additions that change a decision HPA would make from the same
# inputs: `spec.forecast.enabled` (proactive headroom) and `spec.eventReduction.enabled`
# (hysteresis against small moves). Each section is a Struct with an `enabled` field.
HPA_INCOMPATIBLE_SWITCHES = ("forecast", "event_reduction")


def hpa_compatible(spec: ScalingPolicySpec) -> ScalingPolicySpec:
    """The policy in its HPA-compatible mode: forecast and event reduction switched off.

    The only place that turns them off (tests/hpa_diff compares this mode with the upstream HPA
    code). The other additions (panic, fallback, scale to zero, replicaCap) stay as the user
    set them: they are off unless set, and where set, docs/scalingpolicy.md names how they
    differ from HPA. A section the policy does not have is left as it is.
    """
    changes: dict[str, Any] = {}
    for field in HPA_INCOMPATIBLE_SWITCHES:
        section = getattr(spec, field, None)
        if section is not None and getattr(section, "enabled", False):
            changes[field] = msgspec.structs.replace(section, enabled=False)
    return msgspec.structs.replace(spec, **changes) if changes else spec


# --- decoding ---------------------------------------------------------------------------------


def _explain(err: msgspec.ValidationError) -> PolicyError:
    text = str(err)
    # msgspec: "Expected `int`, got `str` - at `$.spec.maxReplicas`"
    problem, path = text, "$"
    if " - at `" in text:
        problem, _, at = text.rpartition(" - at `")
        path = at.rstrip("`")
    # Errors raised by __post_init__ come as "field: problem", relative to the struct at `path`.
    inner = re.match(r"^([A-Za-z][\w.\[\]]*): (.*)$", problem)
    if inner:
        path, problem = f"{path}.{inner.group(1)}", inner.group(2)
    if problem.startswith("Invalid enum value"):
        field = re.sub(r"\[\d+\]$", "", path.rsplit(".", 1)[-1])
        allowed = _literal_choices().get(field)
        if allowed:
            problem += f"; allowed: {', '.join(map(str, allowed))}"
    return PolicyError(path.removeprefix("$."), problem)


_CHOICES: dict[str, tuple[object, ...]] = {}


def _literal_choices() -> dict[str, tuple[object, ...]]:
    """Field name -> allowed literal values, collected once from the ScalingPolicy types."""
    if _CHOICES:
        return _CHOICES
    seen: set[type] = set()

    def walk(t: msgspec.inspect.Type, field: str | None) -> None:
        if isinstance(t, msgspec.inspect.LiteralType) and field:
            _CHOICES[field] = tuple(t.values)
        elif isinstance(t, msgspec.inspect.UnionType):
            for member in t.types:
                walk(member, field)
        elif isinstance(t, msgspec.inspect.ListType):
            walk(t.item_type, field)
        elif isinstance(t, msgspec.inspect.StructType) and t.cls not in seen:
            seen.add(t.cls)
            for f in t.fields:
                walk(f.type, f.encode_name)

    walk(msgspec.inspect.type_info(ScalingPolicy), None)
    return _CHOICES


def policy_from_obj(obj: Mapping[str, Any]) -> ScalingPolicy:
    """Validate a decoded object (a YAML document or a CRD from the API server)."""
    try:
        return msgspec.convert(obj, ScalingPolicy, str_keys=True)
    except msgspec.ValidationError as err:
        raise _explain(err) from None


def policies_from_yaml(text: str) -> list[ScalingPolicy]:
    """Every ScalingPolicy in a (multi-document) YAML text."""
    import yaml

    out: list[ScalingPolicy] = []
    for i, doc in enumerate(yaml.safe_load_all(text)):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise PolicyError(f"document {i}", "must be a mapping (a ScalingPolicy object)")
        try:
            out.append(policy_from_obj(doc))
        except PolicyError as err:
            name = doc.get("metadata", {}).get("name", f"document {i}")
            raise PolicyError(f"{name}: {err.path}", err.problem) from None
    return out
