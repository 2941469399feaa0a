"""Several collectors split the pull sources through a consumer group.

Each collector joins the group `group_id` on `governor.collector-sources` (it reads nothing that
matters there: the group's assignment is what it wants). When the group assigns it partitions,
the scheduler keeps the pull sources whose `workload/metric` falls in one of them (the producer's
partitioner) and stops the others; another collector of the group runs those. Push sources run in
every collector. A collector alone, or one whose group has not answered yet, runs every pull
source, so a single collector needs nothing of this; at a join the newcomer may poll a source
once beside its old owner (at least once, never none), until the assignment settles.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from functools import partial
from typing import Any

from governor.bus import Consumer, Message, Producer
from governor.events import COLLECTOR_SOURCES, CollectorMember
from governor.ownership import partition_of
from governor_collector.config import CollectorSettings
from governor_collector.scheduler import Key, Scheduler

log = logging.getLogger("governor_collector.share")


def in_share(key: Key, *, partitions: int, mine: frozenset[int]) -> bool:
    """Whether the pull source `key` is this collector's (pure)."""
    return bool(mine) and partition_of(f"{key[0]}/{key[1]}", partitions) in mine


class SourceShare:
    def __init__(self, settings: CollectorSettings, producer: Producer, scheduler: Scheduler):
        self.scheduler, self.producer = scheduler, producer
        self.member = f"{settings.kafka.client_id}-{socket.gethostname()}-{os.getpid()}"
        self.consumer = Consumer(
            settings.kafka.bootstrap,
            [COLLECTOR_SOURCES],
            group_id=settings.group_id,
            client_id=f"{settings.kafka.client_id}-share",
            auto_offset_reset="latest",
            dlq_producer=producer,
            start_timeout_s=settings.start_timeout_seconds,
            security=settings.kafka.security,
            on_assigned=self._assigned,
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        # Polling keeps the membership alive (a member that stops polling is dropped).
        self._task = asyncio.create_task(self.consumer.run(self._ignore))

    async def stop(self) -> None:
        await self.consumer.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _ignore(self, msg: Message[Any]) -> None:
        return None

    async def _assigned(self, tps: set[Any]) -> None:
        mine = frozenset(tp.partition for tp in tps)
        n = self.consumer.partition_count(COLLECTOR_SOURCES.name)
        plan = await self.scheduler.reassign(partial(in_share, partitions=n, mine=mine))
        log.info(
            "pull sources reassigned: %d started, %d stopped",
            len(plan.start),
            len(plan.stop),
            extra={"partitions": sorted(mine)},
        )
        member = CollectorMember(collector=self.member, partitions=sorted(mine), at=time.time())
        await self.producer.publish(COLLECTOR_SOURCES, member)
