"""A cluster for the pipeline tests that run without an API server: it takes up each decision at
once (ready immediately), as the workloads' WorkloadState."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from governor import events
from governor.bus import Consumer, Producer
from governor.events import Topic
from governor.spec import policy_from_obj


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


async def publish_deployment(producer: Producer, policy_obj: dict[str, Any]) -> None:
    """The ScalingPolicy `policy_obj` and its Deployment (of the same name) at 1 replica, ready,
    as the cluster collector would publish them."""
    meta = policy_obj["metadata"]
    await producer.send(events.POLICIES, events.PolicyRecord(policy=policy_from_obj(policy_obj)))
    await producer.send(
        events.WORKLOADS,
        events.WorkloadState(
            workload=f"{meta['namespace']}/Deployment/{meta['name']}",
            spec_replicas=1,
            ready_replicas=1,
            observed_at=time.time(),
        ),
    )


@dataclass
class InstantClusterTask:
    """`instant_cluster` running on a consumer of its own; `seen` fills as decisions come."""

    follow: Consumer[Any]
    task: asyncio.Task[None]
    seen: list[events.ScaleDecision]

    @classmethod
    async def start(
        cls,
        bootstrap: str,
        decisions: Topic[events.ScaleDecision],
        producer: Producer,
        ours: Collection[str],
    ) -> InstantClusterTask:
        follow = Consumer(bootstrap, [decisions], group_id=None, check_keys=False)
        await follow.start()
        seen: list[events.ScaleDecision] = []
        return cls(follow, asyncio.create_task(instant_cluster(follow, producer, ours, seen)), seen)

    async def stop(self) -> None:
        self.task.cancel()
        await self.follow.stop()
