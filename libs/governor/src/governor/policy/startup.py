"""Start-up latency learned from what the target's replicas did: a running median and p90.

The cluster-side collector (inventory/targets.py: pods' creationTimestamp → Ready condition) and
the simulator's replica model publish it the same way, through `estimate`, in WorkloadState's
`startup_p50_seconds` / `startup_p90_seconds`; the forecast uses the p90 as its horizon.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

RECENT = 32  # the newest start-ups the estimate is taken over


def estimate(durations: Sequence[float]) -> tuple[float | None, float | None]:
    """(median, p90) of the newest RECENT durations (seconds, newest last), nearest rank."""
    recent = sorted(d for d in durations[-RECENT:] if d >= 0 and math.isfinite(d))
    if not recent:
        return None, None
    n = len(recent)
    return recent[(n - 1) // 2], recent[max(0, math.ceil(0.9 * n) - 1)]
