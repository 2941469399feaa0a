"""Each service's settings type, by the name of its config file (deploy/k8s/base/config), and
where its Kafka settings are: the cluster collector's are flat, the others' under `kafka`."""

from __future__ import annotations

from typing import Any

from governor.kafka_security import KafkaSecurity
from governor_actuator.config import ActuatorSettings
from governor_aggregator.main import AggregatorSettings
from governor_collector.cluster.collector import ClusterCollectorSettings
from governor_collector.config import CollectorSettings
from governor_decider.main import DeciderSettings
from governor_metrics_adapter.config import MetricsAdapterSettings

SETTINGS: dict[str, type[Any]] = {
    "collector": CollectorSettings,
    "cluster-collector": ClusterCollectorSettings,
    "aggregator": AggregatorSettings,
    "decider": DeciderSettings,
    "actuator": ActuatorSettings,
    "metrics-adapter": MetricsAdapterSettings,
}


def kafka_of(settings: Any) -> tuple[KafkaSecurity, str]:
    """(security, bootstrap) of a service's settings."""
    if isinstance(settings, ClusterCollectorSettings):
        return settings.kafka_security, settings.bootstrap
    return settings.kafka.security, settings.kafka.bootstrap
