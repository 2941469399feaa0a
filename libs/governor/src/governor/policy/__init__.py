"""governor.policy: pure decision math. No I/O; time is always an argument.

The scale policy (`evaluate`) is HPA's algorithm with KEDA's and Knative's additions; its parts
live in small modules: replicas (HPA's per-metric arithmetic), behavior (stabilization and rate
limits), staleness (missing data and fallback), panic (Knative), zero (scale to zero), and scale
(the composition).
"""

from governor.policy.scale import evaluate
from governor.policy.types import MetricObservation, ScaleInputs, ScaleResult, ScaleState

__all__ = ["MetricObservation", "ScaleInputs", "ScaleResult", "ScaleState", "evaluate"]
