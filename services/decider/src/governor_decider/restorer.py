"""The checkpoints of newly assigned partitions, read outside the rebalance.

aiokafka awaits the partitions-assigned callback inside the group's join. Reading the whole
checkpoint topic there (seconds at 10,000 workloads, minutes when its segments never rolled)
outlasted the session timeout: the coordinator removed the member, the group rebalanced, the
next callback read again, round and round, the group empty most of the time (issue 19).

So the callback only pauses the new partitions and starts the restore; the restore reads the
checkpoints (retrying until it gets them), hands them over (`apply`: the cores own the
partitions from then on), then resumes the partitions. No record of a new partition is fetched
before its checkpoints are in. A revocation cancels a restore still running and waits for it:
it either did not hand anything over, or it is done.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from aiokafka import TopicPartition

from governor.bus import Consumer
from governor.retry import retrying

log = logging.getLogger("governor.decider")

T = TypeVar("T")


class Restorer(Generic[T]):
    """`assigned`/`revoked` are the consumer's partition hooks; `read` fetches what a new
    assignment needs (no lock held: the service keeps running), `apply` hands it over with the
    partitions (under the service's lock, without awaiting anything a revocation could cut)."""

    def __init__(
        self,
        consumer: Consumer,
        read: Callable[[], Awaitable[T]],
        apply: Callable[[set[TopicPartition], T], Awaitable[None]],
    ) -> None:
        self.consumer, self.read, self.apply = consumer, read, apply
        self._task: asyncio.Task[None] | None = None
        self._failed = False

    @property
    def restored(self) -> bool:
        """No restore is running, and the last one did not fail (its partitions would stay
        paused: the readiness probe says so rather than a silent stall)."""
        return self._task is None or (self._task.done() and not self._failed)

    async def assigned(self, tps: set[TopicPartition]) -> None:
        await self.cancel()
        self.consumer.pause(tps)
        self._task = asyncio.create_task(self._restore(tps), name="decider restore")

    async def revoked(self, tps: set[TopicPartition]) -> None:
        await self.cancel()

    async def cancel(self) -> None:
        task, self._task = self._task, None
        if task is None or task.done():
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            # Our own cancellation is the task's; the caller's still propagates.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def _restore(self, tps: set[TopicPartition]) -> None:
        self._failed = False
        try:
            got = await retrying(
                on=Exception, first_s=1.0, max_s=30.0, log=log, what="reading the checkpoints"
            )(self.read)
            await self.apply(tps, got)
        except asyncio.CancelledError:
            log.info("restore of %d partitions cancelled by a rebalance", len(tps))
            raise
        except Exception:
            self._failed = True
            log.exception("restore of %d partitions failed; they stay paused", len(tps))
            return
        self.consumer.resume(tps)
