"""governor: an event-driven autoscaler for Kubernetes over Kafka."""

__version__ = "0.1.0"
