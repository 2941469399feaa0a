"""governor: an event-driven autoscaler for Kubernetes over Kafka."""

from governor.compiled import refuse_stale

__version__ = "0.1.0"

# Before any hot-path module is imported: a compiled build older than its source fails here,
# naming the fix, instead of running code that is no longer in the tree (governor.compiled).
refuse_stale()
