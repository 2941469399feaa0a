"""What `governor import` does with every field of an HPA or a ScaledObject: the one table.

Each `Field` names an input path (`spec.metrics[].resource.name`: `[]` for list items), the
governor field it becomes (empty when none) and, when something is not carried over exactly, the
note that says why. The converters report the notes of the fields an object actually has
(`account`), a field no entry matches is reported as unknown, and the migration table in
docs/scalingpolicy.md is printed from these tables (`migration_table`), so the notes, the docs and
the converters cannot drift apart. The most specific entry wins (`metadata.annotations.X` over
`metadata.annotations`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple


class Field(NamedTuple):
    path: str
    governor: str  # the governor field it becomes; "" when none
    note: str = ""  # why it is not carried over exactly; "" when it is


# --- shared by both kinds -----------------------------------------------------------------------

_SERVER_SET = "set by the API server, not configuration: not carried over"

META_FIELDS: tuple[Field, ...] = (
    Field("apiVersion", "apiVersion: governor.dev/v1alpha1"),
    Field("kind", "kind: ScalingPolicy"),
    Field("metadata.name", "metadata.name"),
    Field("metadata.namespace", "metadata.namespace"),
    Field("metadata.labels", "metadata.labels"),
    Field(
        "metadata.annotations",
        "",
        "annotations other than the autoscaler's own are not carried over (governor reads only "
        "governor.dev/ annotations)",
    ),
    Field("metadata.generateName", "", "generateName is not supported: give the policy a name"),
    Field("metadata.creationTimestamp", "", _SERVER_SET),
    Field("metadata.deletionGracePeriodSeconds", "", _SERVER_SET),
    Field("metadata.deletionTimestamp", "", _SERVER_SET),
    Field("metadata.finalizers", "", "finalizers belong to the original object: not carried over"),
    Field("metadata.generation", "", _SERVER_SET),
    Field("metadata.managedFields", "", _SERVER_SET),
    Field(
        "metadata.ownerReferences",
        "",
        "owner references point at the original object's owners: not carried over",
    ),
    Field("metadata.resourceVersion", "", _SERVER_SET),
    Field("metadata.selfLink", "", _SERVER_SET),
    Field("metadata.uid", "", _SERVER_SET),
    Field("status", "", "observed state written by the controller, not configuration: dropped"),
)

_BEHAVIOR = "spec.behavior (verbatim: HPA's behavior)"
_TARGET = "metrics[].target"
_PUSH = (
    "comes from a metrics adapter (custom/external metrics API) governor does not query: the "
    "metric became a `push` source; publish it to governor.metrics (POST /v1/samples or the topic) "
    "or replace the source with a prometheus query"
)
_SELECTOR = (
    "the selector is part of the metric's name (so two selectors make two metrics); governor "
    "does not filter pushed samples: publish the selected series under that name"
)

# --- HorizontalPodAutoscaler (autoscaling/v2; v2beta2, v2beta1 and v1 are converted to it first) -

HPA_FIELDS: tuple[Field, ...] = (
    *META_FIELDS,
    Field("spec.scaleTargetRef.apiVersion", "spec.targetRef.apiVersion"),
    Field("spec.scaleTargetRef.kind", "spec.targetRef.kind"),
    Field("spec.scaleTargetRef.name", "spec.targetRef.name"),
    Field("spec.minReplicas", "spec.minReplicas (default 1, as HPA)"),
    Field("spec.maxReplicas", "spec.maxReplicas"),
    Field("spec.behavior", _BEHAVIOR),
    Field("spec.metrics[].type", "spec.metrics[].source.type"),
    Field("spec.metrics[].resource.name", "spec.metrics[].source.resource (cpu, memory)"),
    Field("spec.metrics[].resource.target", _TARGET),
    Field("spec.metrics[].containerResource.name", "spec.metrics[].source.resource (cpu, memory)"),
    Field(
        "spec.metrics[].containerResource.container",
        "spec.metrics[].name",
        "governor's resource source measures the whole pod (the sum over its containers), not "
        "one container: the target was kept, but a sidecar's usage now counts",
    ),
    Field("spec.metrics[].containerResource.target", _TARGET),
    Field("spec.metrics[].pods.metric.name", "spec.metrics[].name (source push)", _PUSH),
    Field("spec.metrics[].pods.metric.selector", "spec.metrics[].name", _SELECTOR),
    Field("spec.metrics[].pods.target", _TARGET),
    Field("spec.metrics[].object.metric.name", "spec.metrics[].name (source push)", _PUSH),
    Field("spec.metrics[].object.metric.selector", "spec.metrics[].name", _SELECTOR),
    Field(
        "spec.metrics[].object.describedObject",
        "spec.metrics[].name",
        "the described object is part of the metric's name; publish that object's metric",
    ),
    Field("spec.metrics[].object.target", _TARGET),
    Field("spec.metrics[].external.metric.name", "spec.metrics[].name (source push)", _PUSH),
    Field("spec.metrics[].external.metric.selector", "spec.metrics[].name", _SELECTOR),
    Field("spec.metrics[].external.target", _TARGET),
)

# Annotations the API server uses to round-trip v2 fields through autoscaling/v1.
HPA_V1_ANNOTATIONS: tuple[Field, ...] = (
    Field(
        "metadata.annotations.autoscaling.alpha.kubernetes.io/metrics",
        "spec.metrics (as the API server converts v1)",
    ),
    Field(
        "metadata.annotations.autoscaling.alpha.kubernetes.io/behavior",
        "spec.behavior (as the API server converts v1)",
    ),
    Field(
        "metadata.annotations.autoscaling.alpha.kubernetes.io/conditions",
        "",
        "observed state (status conditions): dropped",
    ),
    Field(
        "metadata.annotations.autoscaling.alpha.kubernetes.io/current-metrics",
        "",
        "observed state (current metrics): dropped",
    ),
)
HPA_V1_FIELDS: tuple[Field, ...] = (
    Field(
        "spec.targetCPUUtilizationPercentage",
        "spec.metrics[cpu] (resource cpu, Utilization), as the API server converts v1",
    ),
)

# --- KEDA ScaledObject (keda.sh/v1alpha1) -----------------------------------------------------

_ZERO = "spec.scaleToZero"
KEDA_FIELDS: tuple[Field, ...] = (
    *META_FIELDS,
    Field(
        "metadata.annotations.autoscaling.keda.sh/paused",
        'metadata.annotations["governor.dev/paused"]',
    ),
    Field(
        "metadata.annotations.autoscaling.keda.sh/paused-replicas",
        'metadata.annotations["governor.dev/paused"]',
        "governor pauses at the current replicas: scale the target to the paused count yourself",
    ),
    Field(
        "metadata.annotations.autoscaling.keda.sh/paused-scale-in",
        "spec.behavior.scaleDown.selectPolicy: Disabled",
    ),
    Field(
        "metadata.annotations.autoscaling.keda.sh/paused-scale-down",
        "spec.behavior.scaleDown.selectPolicy: Disabled",
    ),
    Field(
        "metadata.annotations.autoscaling.keda.sh/paused-scale-out",
        "spec.behavior.scaleUp.selectPolicy: Disabled",
    ),
    Field(
        "metadata.annotations.autoscaling.keda.sh/paused-scale-up",
        "spec.behavior.scaleUp.selectPolicy: Disabled",
    ),
    Field(
        "metadata.annotations.scaledobject.keda.sh/transfer-hpa-ownership",
        "",
        "governor refuses a target an HPA also scales: delete the HPA instead of transferring it",
    ),
    Field(
        "metadata.annotations.validations.keda.sh/hpa-ownership",
        "",
        "governor always refuses a target another autoscaler owns; the check cannot be disabled",
    ),
    Field("spec.scaleTargetRef.name", "spec.targetRef.name"),
    Field("spec.scaleTargetRef.apiVersion", "spec.targetRef.apiVersion (default apps/v1)"),
    Field("spec.scaleTargetRef.kind", "spec.targetRef.kind (default Deployment)"),
    Field(
        "spec.scaleTargetRef.envSourceContainerName",
        "",
        "governor's sources read `*FromEnv` variables from the collector's environment, not from "
        "a container of the target",
    ),
    Field("spec.pollingInterval", "spec.metrics[].source.intervalSeconds (default 30)"),
    Field("spec.cooldownPeriod", f"{_ZERO}.cooldownSeconds (default 300)"),
    Field(
        "spec.initialCooldownPeriod",
        f"{_ZERO}.initialCooldownSeconds",
        "counted from governor's first evaluation of the policy (KEDA: from its creation), and "
        "never shorter than cooldownSeconds: governor does not scale a new policy to zero before "
        "a cooldown has passed",
    ),
    Field(
        "spec.idleReplicaCount",
        "spec.minReplicas: 0 with spec.scaleToZero",
        "governor's active floor is 1 replica: a minReplicaCount above 1 only applies in KEDA",
    ),
    Field("spec.minReplicaCount", "spec.minReplicas (default 0: spec.scaleToZero)"),
    Field("spec.maxReplicaCount", "spec.maxReplicas (default 100)"),
    Field("spec.fallback.failureThreshold", "spec.fallback.failureThreshold"),
    Field("spec.fallback.replicas", "spec.fallback.replicas"),
    Field("spec.fallback.behavior", "spec.fallback.behavior"),
    Field("spec.advanced.horizontalPodAutoscalerConfig.behavior", _BEHAVIOR),
    Field(
        "spec.advanced.horizontalPodAutoscalerConfig.name",
        "",
        "governor creates no HPA: the name is not used",
    ),
    Field(
        "spec.advanced.restoreToOriginalReplicaCount",
        "",
        "governor leaves the replicas as they are when a policy is deleted",
    ),
    Field(
        "spec.advanced.scalingModifiers",
        "",
        "governor has no formula over metrics (composite metric): the triggers were converted "
        "as separate metrics and the policy follows the highest of their replica counts, not "
        "the formula; formula, target, activationTarget and metricType are not used",
    ),
    Field("spec.triggers[].type", "spec.metrics[].source.type"),
    Field("spec.triggers[].name", "spec.metrics[].name"),
    Field("spec.triggers[].metricType", "spec.metrics[].target.type"),
    Field("spec.triggers[].metadata", "spec.metrics[].source (per scaler, below)"),
    Field(
        "spec.triggers[].authenticationRef",
        "spec.metrics[].source.*FromEnv",
        "governor reads no TriggerAuthentication: each secret parameter is read from an "
        "environment variable of the collector named after the TriggerAuthentication and the "
        "parameter; set it from the Secret",
    ),
    Field(
        "spec.triggers[].useCachedMetrics",
        "",
        "governor samples each source once per interval for every reader: nothing to cache",
    ),
)

# --- KEDA trigger metadata, per scaler --------------------------------------------------------

_ACTIVATION = f"{_ZERO}.activationThreshold (one for the policy: the highest of its triggers')"
_NO_TLS = "governor's source has no TLS or SASL settings: it connects in plaintext"
_ENV = "the name of an environment variable of the collector (not of the target)"


def _env(name: str, becomes: str) -> Field:
    return Field(name, becomes, _ENV)


# where Redis is and who connects: the same for the redis and redis-streams scalers
_REDIS_CONNECTION = (
    Field("address", "source.address"),
    Field("host", "source.address (host:port)"),
    Field("port", "source.address (host:port)"),
    _env("addressFromEnv", "source.addressFromEnv"),
    _env("hostFromEnv", "source.addressFromEnv"),
    Field("portFromEnv", "", "give addressFromEnv as host:port instead"),
    _env("usernameFromEnv", "source.usernameFromEnv"),
    _env("passwordFromEnv", "source.passwordFromEnv"),
)

SCALER_FIELDS: dict[str, tuple[Field, ...]] = {
    "cpu": (
        Field("value", "metrics[].target"),
        Field("type", "metrics[].target.type (deprecated spelling of metricType)"),
        Field("activationValue", _ACTIVATION),
        Field(
            "containerName",
            "metrics[].name",
            "governor's resource source measures the whole pod (the sum over its containers), "
            "not one container",
        ),
    ),
    "kafka": (
        Field("bootstrapServers", "source.bootstrapServers"),
        Field("consumerGroup", "source.consumerGroup"),
        Field("topic", "source.topic"),
        Field("lagThreshold", "source.lagThreshold, target averageValue"),
        Field("activationLagThreshold", f"source.activationLagThreshold, {_ACTIVATION}"),
        Field("offsetResetPolicy", "source.offsetResetPolicy"),
        Field("allowIdleConsumers", "source.allowIdleConsumers"),
        Field("excludePersistentLag", "source.excludePersistentLag"),
        Field("limitToPartitionsWithLag", "source.limitToPartitionsWithLag"),
        Field(
            "scaleToZeroOnInvalidOffset",
            "",
            "partitions without a committed offset count as governor's offsetResetPolicy says",
        ),
        Field("version", "", "the client negotiates the protocol version with the broker"),
        Field("partitionLimitation", "", "governor reads every partition of the topic"),
        Field("sasl", "", _NO_TLS),
        Field("saslTokenProvider", "", _NO_TLS),
        Field("tls", "", _NO_TLS),
        Field("unsafeSsl", "", _NO_TLS),
        Field("awsRegion", "", _NO_TLS),
    ),
    "prometheus": (
        Field("serverAddress", "source.serverAddress"),
        Field("query", "source.query"),
        Field("threshold", "target (AverageValue unless metricType Value)"),
        Field("activationThreshold", _ACTIVATION),
        Field(
            "ignoreNullValues",
            "",
            "governor never publishes a made-up 0 for an empty result: append `or vector(0)` "
            "to the query if no series means zero",
        ),
        Field("namespace", "", "no tenant header: put the namespace into serverAddress's path"),
        Field("customHeaders", "", "governor's prometheus source sends no custom headers"),
        Field("queryParameters", "", "governor's prometheus source sends no extra parameters"),
        Field("unsafeSsl", "", "governor verifies certificates"),
        Field("authModes", "", "governor's prometheus source does not authenticate"),
        Field("metricName", "", "deprecated in KEDA; the metric's name is the trigger's"),
    ),
    "cron": (
        Field("timezone", "source.timezone"),
        Field("start", "source.start"),
        Field("end", "source.end"),
        Field("desiredReplicas", "source.desiredReplicas (target averageValue 1)"),
    ),
    "metrics-api": (
        Field("url", "source.url"),
        Field("valueLocation", "source.valueLocation"),
        Field("targetValue", "target (AverageValue unless metricType Value)"),
        Field("activationTargetValue", _ACTIVATION),
        Field("format", "", "governor reads JSON only"),
        Field("authMode", "source.authMode"),
        Field("method", "source.method"),
        Field("keyParamName", "source.keyParamName"),
        Field("unsafeSsl", "", "governor verifies certificates"),
        Field(
            "aggregateFromKubeServiceEndpoints",
            "",
            "governor asks the URL once; it does not visit each endpoint of a Service",
        ),
        Field("aggregationType", "", "see aggregateFromKubeServiceEndpoints"),
    ),
    "kubernetes-workload": (
        Field("podSelector", "source.podSelector"),
        Field("value", "target (AverageValue)"),
        Field("activationValue", _ACTIVATION),
    ),
    "rabbitmq": (
        Field("host", "source.host"),
        _env("hostFromEnv", "source.hostFromEnv"),
        Field(
            "protocol",
            "",
            "governor reads RabbitMQ's management HTTP API (port 15672); an amqp:// host becomes "
            "http://<host>:15672 with the same credentials and vhost",
        ),
        Field("mode", "source.mode"),
        Field("value", "target (AverageValue)"),
        Field("activationValue", _ACTIVATION),
        Field("queueName", "source.queueName"),
        Field("vhostName", "source.vhostName"),
        Field("queueLength", "target (deprecated spelling of mode QueueLength, value)"),
        Field("publishRate", "target (deprecated spelling of mode MessageRate, value)"),
        Field("useRegex", "source.useRegex"),
        Field("operation", "source.operation"),
        Field("pageSize", "", "governor reads the vhost's queues in one request"),
        Field("excludeUnacknowledged", "source.excludeUnacknowledged"),
        Field("timeout", "", "governor's HTTP timeout follows the source's interval"),
        Field("unsafeSsl", "", "governor verifies certificates"),
        _env("usernameFromEnv", "source.usernameFromEnv"),
        _env("passwordFromEnv", "source.passwordFromEnv"),
    ),
    "redis": (
        *_REDIS_CONNECTION,
        Field("listName", "source.listName"),
        Field("listLength", "target (AverageValue)"),
        Field("activationListLength", _ACTIVATION),
        Field("keyName", "source.keyName"),
        Field("keyValue", "target (AverageValue)"),
        Field("activationValue", _ACTIVATION),
        Field("enableTLS", "source.enableTls"),
        Field("unsafeSsl", "", "governor verifies certificates"),
        Field("databaseIndex", "source.databaseIndex"),
        Field("dbIndex", "source.databaseIndex (old spelling)"),
    ),
    "redis-streams": (
        *_REDIS_CONNECTION,
        Field("stream", "source.stream"),
        Field("consumerGroup", "source.consumerGroup"),
        Field("pendingEntriesCount", "source.measure pendingEntries, target (AverageValue)"),
        Field("streamLength", "source.measure streamLength, target (AverageValue)"),
        Field("lagCount", "source.measure lag, target (AverageValue)"),
        Field("activationLagCount", _ACTIVATION),
        Field("enableTLS", "source.enableTls"),
        Field("unsafeSsl", "", "governor verifies certificates"),
        Field("databaseIndex", "source.databaseIndex"),
    ),
}
SCALER_FIELDS["memory"] = SCALER_FIELDS["cpu"]
SCALER_FIELDS["apache-kafka"] = SCALER_FIELDS["kafka"]

# Scalers with no governor source, and why; anything else is refused as unknown.
NO_SOURCE: dict[str, str] = {
    "aws-sqs-queue": "AWS SQS",
    "aws-cloudwatch": "AWS CloudWatch",
    "aws-kinesis-stream": "AWS Kinesis",
    "aws-dynamodb": "AWS DynamoDB",
    "aws-dynamodb-streams": "AWS DynamoDB Streams",
    "gcp-pubsub": "GCP Pub/Sub",
    "gcp-stackdriver": "GCP Cloud Monitoring",
    "gcp-storage": "GCP Cloud Storage",
    "gcp-cloudtasks": "GCP Cloud Tasks",
    "azure-queue": "Azure Storage Queue",
    "azure-servicebus": "Azure Service Bus",
    "azure-eventhub": "Azure Event Hubs",
    "azure-monitor": "Azure Monitor",
    "azure-blob": "Azure Blob Storage",
    "azure-log-analytics": "Azure Log Analytics",
    "azure-app-insights": "Azure Application Insights",
    "azure-pipelines": "Azure Pipelines",
    "azure-data-explorer": "Azure Data Explorer",
    "datadog": "Datadog",
    "new-relic": "New Relic",
    "dynatrace": "Dynatrace",
    "github-runner": "GitHub Actions",
    "huawei-cloudeye": "Huawei Cloudeye",
    "ibmmq": "IBM MQ",
    "solace-event-queue": "Solace PubSub+",
}


# --- accounting -------------------------------------------------------------------------------


def leaves(obj: Any, prefix: str = "") -> Iterator[str]:
    """The schema paths of an object's leaves (`[]` for list items, map keys joined by `.`)."""
    if isinstance(obj, Mapping) and obj:
        for key, value in obj.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, list) and obj:
        for item in obj:
            yield from leaves(item, f"{prefix}[]")
    else:
        yield prefix


def _covers(entry: str, path: str) -> bool:
    return path == entry or path.startswith((entry + ".", entry + "["))


def match(table: Iterable[Field], path: str) -> Field | None:
    """The most specific entry covering `path`, or None."""
    best: Field | None = None
    for f in table:
        if _covers(f.path, path) and (best is None or len(f.path) > len(best.path)):
            best = f
    return best


def account(
    obj: Mapping[str, Any],
    table: Iterable[Field],
    skip: Iterable[str] = (),
    quiet: Iterable[str] = (),
    unknown: str = "not a field governor's importer knows: dropped",
) -> list[str]:
    """One note per field of `obj` that is not carried over exactly (and per unknown field),
    in the order the fields appear. Paths under `skip` are accounted for by the caller; entries
    in `quiet` carried over exactly for this object (their note does not apply to it)."""
    entries = tuple(table)
    skipped = tuple(skip)
    silent = set(quiet)
    notes: list[str] = []
    seen: set[str] = set()
    for path in leaves(obj):
        if any(_covers(s, path) for s in skipped):
            continue
        f = match(entries, path)
        key, text = (f.path, f.note) if f else (path, unknown)
        if text and key not in seen and key not in silent:
            seen.add(key)
            notes.append(f"{key}: {text}")
    return notes


# --- the migration table (docs/scalingpolicy.md) ----------------------------------------------


def _rows(table: Iterable[Field], prefix: str = "") -> list[str]:
    rows = []
    for f in table:
        governor = f"`{f.governor}`" if f.governor else "—"
        rows.append(f"| `{prefix}{f.path}` | {governor} | {f.note or 'converted'} |")
    return rows


def migration_table() -> str:
    """The markdown migration table: every HPA and KEDA field, what it becomes, and why not."""
    head = ["| field | governor | note |", "| --- | --- | --- |"]
    out = ["### HorizontalPodAutoscaler (autoscaling/v2, v2beta2, v2beta1, v1)", "", *head]
    out += _rows((*HPA_FIELDS, *HPA_V1_FIELDS, *HPA_V1_ANNOTATIONS))
    out += ["", "### KEDA ScaledObject (keda.sh/v1alpha1)", "", *head]
    out += _rows(KEDA_FIELDS)
    for scaler, fields in SCALER_FIELDS.items():
        if scaler in ("memory", "apache-kafka"):
            continue
        alias = {"cpu": " (and `memory`)", "kafka": " (and its alias `apache-kafka`)"}.get(
            scaler, ""
        )
        out += ["", f"#### trigger `{scaler}`{alias}", "", *head]
        out += _rows(fields, "metadata.")
    out += [
        "",
        "#### triggers without a governor source",
        "",
        "Refused by name (the trigger; the ScaledObject converts if another trigger does): "
        + ", ".join(f"`{k}` ({v})" for k, v in NO_SOURCE.items())
        + ". Any other scaler is refused as unknown.",
    ]
    return "\n".join(out) + "\n"
