"""One KEDA trigger -> one governor metric, per scaler (importer_fields.SCALER_FIELDS says what
each metadata field becomes).

KEDA's targets are AverageValue unless `metricType: Value` (the HPA then divides the scaler's
total by the replicas); governor's sources publish the same totals, so the numbers carry over.
Secrets KEDA reads through a TriggerAuthentication are read by governor's collector from its own
environment: `Auth.env(parameter)` names the variable after the TriggerAuthentication and the
parameter (the user sets it from the Secret the TriggerAuthentication points at).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from governor.importer_fields import NO_SOURCE
from governor.importer_hpa import metric_name
from governor.importer_result import ConversionError, number
from governor.spec import rabbitmq_management_url


@dataclass
class Auth:
    """What a trigger's authenticationRef provides: the parameters of the TriggerAuthentication
    when the same file has it (`known`), else a guess from the scaler's usual parameters."""

    name: str
    params: set[str] = field(default_factory=set)
    known: bool = False
    pod_identity: str = ""

    def env(self, parameter: str) -> str:
        return re.sub(r"[^A-Z0-9]+", "_", f"{self.name}_{parameter}".upper()).strip("_")

    def has(self, parameter: str) -> bool:
        return parameter in self.params if self.known else True


@dataclass
class Trigger:
    """One trigger with its context: what the converter needs and where to put notes."""

    index: int
    type: str
    metadata: dict[str, str]
    metric_type: str | None
    name: str | None
    interval: float
    auth: Auth | None
    notes: list[str] = field(default_factory=list)
    # The scaler said what becomes of the authenticationRef (else the generic note stands).
    auth_handled: bool = False
    # Metadata fields carried over exactly for this trigger (their table note does not apply).
    quiet: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"spec.triggers[{self.index}] ({self.type})"

    def get(self, key: str, default: str | None = None) -> str | None:
        value = self.metadata.get(key, default)
        return None if value is None else str(value)

    def require(self, *keys: str) -> str:
        for key in keys:
            if self.metadata.get(key) not in (None, ""):
                return str(self.metadata[key])
        raise ConversionError(f"{self.where}: metadata.{keys[0]} is required")

    def num(self, key: str, default: float | None = None) -> float:
        value = self.metadata.get(key)
        if value in (None, ""):
            if default is None:
                raise ConversionError(f"{self.where}: metadata.{key} is required")
            return default
        return number(value, f"{self.where}.metadata.{key}")

    def flag(self, key: str) -> bool:
        return str(self.metadata.get(key, "false")).strip().lower() == "true"

    def target(self, value: float) -> dict[str, Any]:
        """KEDA's target for a scaler's value: AverageValue unless metricType says Value."""
        kind = self.metric_type or "AverageValue"
        if kind == "Value":
            return {"type": "Value", "value": value}
        if kind == "AverageValue":
            return {"type": "AverageValue", "averageValue": value}
        raise ConversionError(
            f"{self.where}: metricType {kind!r}: only cpu and memory triggers take Utilization "
            "(AverageValue or Value)"
        )

    def secret(self, parameter: str, source_field: str, source: dict[str, Any]) -> bool:
        """Take `parameter` from the TriggerAuthentication, as an env var of the collector."""
        if self.auth is None or not self.auth.has(parameter):
            return False
        source[source_field] = self.auth.env(parameter)
        self.auth_handled = True
        how = "" if self.auth.known else " (assumed: the TriggerAuthentication is not in the file)"
        self.notes.append(
            f"{self.where}: {parameter} comes from TriggerAuthentication {self.auth.name!r}{how}: "
            f"the collector reads it from the environment variable {self.auth.env(parameter)}; "
            "set that from the Secret it names"
        )
        return True

    def credentials(self, source: dict[str, Any]) -> None:
        """A username and password: the environment variables the metadata names, else the
        TriggerAuthentication's (as the collector's environment variables)."""
        for key in ("usernameFromEnv", "passwordFromEnv"):
            if self.get(key):
                source[key] = self.get(key)
        if self.auth is not None:
            self.secret("username", "usernameFromEnv", source)
            self.secret("password", "passwordFromEnv", source)


@dataclass
class Converted:
    metric: dict[str, Any]
    activation: float = 0.0


def _converted(
    t: Trigger,
    labels: list[str],
    source: dict[str, Any],
    target: dict[str, Any],
    activation: float = 0.0,
) -> Converted:
    """The metric `t` becomes: named by `labels` unless the trigger names it, its source polled
    at the trigger's interval."""
    name = t.name or metric_name(t.type, labels)
    source = {**source, "intervalSeconds": t.interval}
    return Converted({"name": name, "source": source, "target": target}, activation)


# --- the scalers ------------------------------------------------------------------------------


def cpu_memory(t: Trigger) -> Converted:
    value = t.num("value")
    kind = t.metric_type or t.get("type") or "Utilization"
    if kind == "Utilization":
        target: dict[str, Any] = {"type": "Utilization", "averageUtilization": value}
    elif kind == "AverageValue":
        target = {"type": "AverageValue", "averageValue": value}
    else:
        raise ConversionError(
            f"{t.where}: metricType {kind!r}: cpu and memory triggers take Utilization or "
            "AverageValue"
        )
    container = t.get("containerName") or ""
    labels = [f"container={container}" if container else ""]
    source = {"type": "resource", "resource": t.type}
    return _converted(t, labels, source, target, t.num("activationValue", 0.0))


def kafka(t: Trigger) -> Converted:
    topic = t.require("topic")
    group = t.require("consumerGroup")
    threshold = int(t.num("lagThreshold", 5.0))  # KEDA's default lagThreshold
    source: dict[str, Any] = {
        "type": "kafka_lag",
        "topic": topic,
        "consumerGroup": group,
        "bootstrapServers": t.require("bootstrapServers"),
        "lagThreshold": threshold,
    }
    if t.get("activationLagThreshold") is not None:
        source["activationLagThreshold"] = int(t.num("activationLagThreshold"))
    if t.get("offsetResetPolicy") is not None:
        source["offsetResetPolicy"] = t.get("offsetResetPolicy")
    for flag in ("allowIdleConsumers", "excludePersistentLag", "limitToPartitionsWithLag"):
        if flag in t.metadata:
            source[flag] = t.flag(flag)
    if t.auth is not None:
        t.auth_handled = True
        t.notes.append(
            f"{t.where}: TriggerAuthentication {t.auth.name!r} (SASL/TLS credentials): "
            "governor's kafka_lag source connects in plaintext without credentials; a broker "
            "that requires them refuses it (the metric then goes stale and the policy holds)"
        )
    labels = [f"topic={topic}", f"group={group}"]
    target = t.target(float(threshold))
    return _converted(t, labels, source, target, t.num("activationLagThreshold", 0.0))


def prometheus(t: Trigger) -> Converted:
    if t.auth is not None:
        t.auth_handled = True
        t.notes.append(
            f"{t.where}: TriggerAuthentication {t.auth.name!r}: governor's prometheus source "
            "does not authenticate; a server that requires it refuses the queries"
        )
    source = {
        "type": "prometheus",
        "query": t.require("query"),
        "serverAddress": t.require("serverAddress"),
    }
    target = t.target(t.num("threshold"))
    return _converted(t, [], source, target, t.num("activationThreshold", 0.0))


def cron(t: Trigger) -> Converted:
    source: dict[str, Any] = {
        "type": "cron",
        "timezone": t.require("timezone"),
        "start": t.require("start"),
        "end": t.require("end"),
        "desiredReplicas": int(t.num("desiredReplicas")),
    }
    # KEDA's cron target: one replica per unit of the published desiredReplicas.
    return _converted(t, [], source, {"type": "AverageValue", "averageValue": 1.0})


_API_AUTH = {
    "bearer": (("token", "tokenFromEnv"),),
    "basic": (("username", "usernameFromEnv"), ("password", "passwordFromEnv")),
    "apiKey": (("apiKey", "apiKeyFromEnv"),),
}


def metrics_api(t: Trigger) -> Converted:
    if (t.get("format") or "json") != "json":
        raise ConversionError(
            f"{t.where}: format {t.get('format')!r}: governor's metrics_api source reads JSON"
        )
    location = t.require("valueLocation")
    source: dict[str, Any] = {"type": "metrics_api", "url": t.require("url")}
    source["valueLocation"] = location
    mode = t.get("authMode")
    if mode:
        modes = [m.strip() for m in mode.split(",")]
        usable = [m for m in modes if m in _API_AUTH]
        if len(usable) != 1 or len(modes) != 1:
            raise ConversionError(
                f"{t.where}: authMode {mode!r}: governor's metrics_api source takes one of "
                "bearer, basic, apiKey (no TLS client certificates)"
            )
        source["authMode"] = usable[0]
        for parameter, env_field in _API_AUTH[usable[0]]:
            if not t.secret(parameter, env_field, source) and parameter != "password":
                raise ConversionError(
                    f"{t.where}: authMode {usable[0]} needs {parameter} from a "
                    "TriggerAuthentication (authenticationRef)"
                )
        if usable[0] == "apiKey":
            if t.get("method"):
                source["method"] = t.get("method")
            if t.get("keyParamName"):
                source["keyParamName"] = t.get("keyParamName")
    target = t.target(t.num("targetValue"))
    return _converted(t, [f"value={location}"], source, target, t.num("activationTargetValue", 0.0))


def kubernetes_workload(t: Trigger) -> Converted:
    selector = t.require("podSelector")
    labels = [re.sub(r"\s*,\s*", ",", selector.strip())]
    source = {"type": "kubernetes_workload", "podSelector": selector}
    return _converted(t, labels, source, t.target(t.num("value")), t.num("activationValue", 0.0))


def management_url(host: str) -> str:
    try:
        return rabbitmq_management_url(host)
    except ValueError as err:
        raise ConversionError(str(err)) from None


def rabbitmq(t: Trigger) -> Converted:
    queue = t.require("queueName")
    mode = t.get("mode")
    value: float
    if mode is None and t.get("queueLength") is not None:
        mode, value = "QueueLength", t.num("queueLength")
    elif mode is None and t.get("publishRate") is not None:
        mode, value = "MessageRate", t.num("publishRate")
    else:
        mode = mode or "QueueLength"
        value = t.num("value", 20.0 if mode == "QueueLength" else None)
    if mode not in ("QueueLength", "MessageRate"):
        raise ConversionError(f"{t.where}: mode {mode!r}: QueueLength or MessageRate")
    source: dict[str, Any] = {"type": "rabbitmq", "queueName": queue, "mode": mode}
    host = t.get("host")
    if host:
        source["host"] = management_url(host)
    elif t.get("hostFromEnv"):
        source["hostFromEnv"] = t.get("hostFromEnv")
    elif not t.secret("host", "hostFromEnv", source):
        raise ConversionError(
            f"{t.where}: no host: give metadata.host, hostFromEnv or a TriggerAuthentication"
        )
    if t.get("protocol") in ("http", "auto", None) and not (host or "").startswith("amqp"):
        t.quiet.append("metadata.protocol")
    if t.get("protocol") == "amqp" or (host or "").startswith("amqp"):
        t.notes.append(
            f"{t.where}: protocol amqp: governor reads the management HTTP API instead (port "
            "15672 of the same host, same credentials and vhost); it must be enabled "
            "(rabbitmq-plugins enable rabbitmq_management)"
        )
    for key, spec_key in (("vhostName", "vhostName"), ("operation", "operation")):
        if t.get(key):
            source[spec_key] = t.get(key)
    for flag in ("useRegex", "excludeUnacknowledged"):
        if flag in t.metadata:
            source[flag] = t.flag(flag)
    t.credentials(source)
    if t.auth is not None:
        if t.auth.known and t.auth.params & {"tls", "ca", "cert", "key"}:
            t.notes.append(
                f"{t.where}: TLS client certificates from {t.auth.name!r}: governor's rabbitmq "
                "source verifies the server with the system's CAs and sends no client certificate"
            )
        if t.auth.pod_identity:
            t.notes.append(
                f"{t.where}: podIdentity {t.auth.pod_identity}: governor's rabbitmq source uses "
                "basic auth only (credentials in the host or *FromEnv)"
            )
    labels = [f"queue={queue}", f"mode={mode}"]
    return _converted(t, labels, source, t.target(value), t.num("activationValue", 0.0))


def _redis_connection(t: Trigger, source: dict[str, Any]) -> None:
    address = t.get("address")
    if not address and t.get("host"):
        address = f"{t.get('host')}:{t.get('port') or '6379'}"
    if address:
        source["address"] = address
    elif t.get("addressFromEnv") or t.get("hostFromEnv"):
        source["addressFromEnv"] = t.get("addressFromEnv") or t.get("hostFromEnv")
    elif not (
        t.secret("address", "addressFromEnv", source) or t.secret("host", "addressFromEnv", source)
    ):
        raise ConversionError(
            f"{t.where}: no address: give metadata.address (host:port), addressFromEnv or a "
            "TriggerAuthentication"
        )
    index = t.get("databaseIndex") or t.get("dbIndex")
    if index:
        source["databaseIndex"] = int(number(index, f"{t.where}.metadata.databaseIndex"))
    if "enableTLS" in t.metadata:
        source["enableTls"] = t.flag("enableTLS")
    t.credentials(source)
    if t.auth is not None and t.auth.known and t.auth.params & {"tls", "ca", "cert", "key"}:
        source["enableTls"] = True
        t.notes.append(
            f"{t.where}: TLS client certificates from {t.auth.name!r}: governor's redis "
            "sources verify the server with the system's CAs and send no client certificate"
        )


def redis(t: Trigger) -> Converted:
    source: dict[str, Any] = {"type": "redis"}
    _redis_connection(t, source)
    if t.get("listName"):
        source["listName"] = t.get("listName")
        value = t.num("listLength", 5.0)  # KEDA's default listLength
        activation = t.num("activationListLength", 0.0)
        label = f"list={t.get('listName')}"
    else:
        source["keyName"] = t.require("keyName", "listName")
        value = t.num("keyValue")
        activation = t.num("activationValue", 0.0)
        label = f"key={t.get('keyName')}"
    return _converted(t, [label], source, t.target(value), activation)


def redis_streams(t: Trigger) -> Converted:
    stream = t.require("stream")
    group = t.get("consumerGroup")
    source: dict[str, Any] = {"type": "redis_streams", "stream": stream}
    _redis_connection(t, source)
    # KEDA: lagCount, else pendingEntriesCount with a consumer group, else streamLength.
    if group and t.get("lagCount") is not None:
        source["measure"], value = "lag", t.num("lagCount")
    elif group:
        source["measure"], value = "pendingEntries", t.num("pendingEntriesCount", 5.0)
    else:
        source["measure"], value = "streamLength", t.num("streamLength", 5.0)
    if group:
        source["consumerGroup"] = group
    labels = [f"stream={stream}", f"group={group}" if group else ""]
    return _converted(t, labels, source, t.target(value), t.num("activationLagCount", 0.0))


SCALERS: dict[str, Callable[[Trigger], Converted]] = {
    "cpu": cpu_memory,
    "memory": cpu_memory,
    "kafka": kafka,
    "apache-kafka": kafka,  # KEDA's experimental Go-client Kafka scaler: same metadata
    "prometheus": prometheus,
    "cron": cron,
    "metrics-api": metrics_api,
    "kubernetes-workload": kubernetes_workload,
    "rabbitmq": rabbitmq,
    "redis": redis,
    "redis-streams": redis_streams,
}


def convert_trigger(t: Trigger) -> Converted:
    convert = SCALERS.get(t.type)
    if convert is None:
        if t.type in NO_SOURCE:
            raise ConversionError(
                f"{t.where}: KEDA scaler {t.type!r} has no governor source: {NO_SOURCE[t.type]} "
                "cannot be queried by governor (publish its metric to governor.metrics, or use "
                "a prometheus trigger on an exporter of it)"
            )
        raise ConversionError(
            f"{t.where}: KEDA scaler {t.type!r} is not one governor converts (known: "
            + ", ".join(sorted(SCALERS))
            + ")"
        )
    return convert(t)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def auth_of(doc: Mapping[str, Any]) -> Auth:
    """The parameters a TriggerAuthentication (or ClusterTriggerAuthentication) provides."""
    spec = _mapping(doc.get("spec"))

    def parameters(refs: Any) -> set[str]:
        items = refs if isinstance(refs, list) else []
        return {str(r.get("parameter")) for r in items if isinstance(r, Mapping)}

    params = parameters(spec.get("secretTargetRef")) | parameters(spec.get("env"))
    for vault in ("hashiCorpVault", "azureKeyVault", "awsSecretManager", "gcpSecretManager"):
        params |= parameters(_mapping(spec.get(vault)).get("secrets"))
    identity = _mapping(spec.get("podIdentity")).get("provider") or ""
    return Auth(
        name=str(_mapping(doc.get("metadata")).get("name")),
        params=params,
        known=True,
        pod_identity=str(identity) if identity != "none" else "",
    )
