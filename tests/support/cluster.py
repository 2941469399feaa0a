"""A cluster for the pipeline tests that run without an API server: it takes up each decision at
once (ready immediately), as the workloads' WorkloadState."""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from governor import events
from governor.bus import Consumer, Producer


async def instant_cluster(
    follow: Consumer[Any],
    producer: Producer,
    ours: Collection[str],
    seen: list[events.ScaleDecision],
) -> None:
    """Forever: each decision `follow` reads for a workload of `ours` is appended to `seen`
    and answered by a WorkloadState at its target replicas, all ready."""
    while True:
        for m in await follow.poll(500):
            d = m.value
            if d is None or d.workload not in ours:
                continue
            seen.append(d)
            await producer.send(
                events.WORKLOADS,
                events.WorkloadState(
                    workload=d.workload,
                    spec_replicas=d.to_replicas,
                    ready_replicas=d.to_replicas,
                    observed_at=time.time(),
                ),
            )
