"""Metric sources, registered by name (the `type` tag of a policy's `metrics[].source`)."""

from governor_collector.sources import kafka_lag, prometheus, push, resource
from governor_collector.sources.base import (
    SOURCES,
    Publisher,
    PullSource,
    PushedSource,
    Source,
    SourceContext,
    SourceError,
    SourceTarget,
    create_source,
    register,
    source_name,
)

__all__ = [
    "SOURCES",
    "Publisher",
    "PullSource",
    "PushedSource",
    "Source",
    "SourceContext",
    "SourceError",
    "SourceTarget",
    "create_source",
    "kafka_lag",
    "prometheus",
    "push",
    "register",
    "resource",
    "source_name",
]
