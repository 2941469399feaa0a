"""The cyclic collector's configuration of a process that holds one policy state per workload.

The decider (services/decider) and the policy benchmarks (bench/policy_throughput.py,
bench/decider_cores.py) call the same two functions, so what the benchmarks measure is what the
service runs. The aggregator (services/aggregator) too: its batches of records and windows were
the same young garbage, and Python's thresholds spent 8 % of its CPU in the collector at 5,000
workloads (bench/pipeline_latency.py; 0.47-0.51 cores for two aggregators before, 0.41 after,
RSS the same).

Why: every evaluation builds the workload's next `ScaleState` (policy/types.py): a handful of
new tuples (the recommendation history, the scale events, the forecaster's windows). A tuple is
tracked by the collector when it is made and untracked only when a young collection first
examines it, and examining one reads every element's header: old, cold memory at 10,000
workloads. With Python's gen-0 threshold (700) every state is examined once, a collection every
~200 evaluations: 15-23 % of an evaluation (bench/policy_throughput.py, "GC takes"). The count
that triggers a young collection is allocations minus deallocations of tracked objects, and
each state replaces the one before it, so with a threshold above one round of the fleet
(10,000 workloads × ~8 tuples) most states are replaced before any collection looks at them, and
young collections become rare.

Memory bound: at most YOUNG_THRESHOLD tracked objects (net) are made between two young
collections, so garbage in cycles (asyncio's, exceptions with tracebacks) still goes within a
bounded count of allocations, a few tens of MB at worst.

`freeze_startup` then moves what start-up made (modules, the policy and workload tables, the
restored checkpoints) to the permanent generation, so the older-generation collections do not
walk it again and again.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 100_000


def configure() -> tuple[int, int, int]:
    """Sets the young generation's threshold (the older two keep Python's); returns all three."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    return gc.get_threshold()


def freeze_startup() -> int:
    """Collects once, then freezes every object left: call after start-up. Returns how many
    objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
