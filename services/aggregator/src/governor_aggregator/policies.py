"""The aggregator's reader of governor.policies: each workload's windows into the core.

A group-less consumer reads the compacted topic from its beginning and follows it
(`governor.cores.aggregator.PolicyWindows` turns each record into the workloads whose windows
it sets, `AggregatorCore.on_policy` takes them, under the aggregation's lock: a batch never
sees half a change). The agent folds nothing before the table was read to its end (`ready`:
the consumer's position reached, on every partition, the end the broker gave when it started),
so the replay of a policy's older records (a compacted topic
keeps them until it is compacted) only moves sizes the core holds no windows for yet; a topic
that cannot be read holds the agent back at most `policies_wait_seconds`, then the defaults
hold until the policies come. A change that comes later restarts the windows it resizes
(`AggregatorCore.conform`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, TopicPartition

from governor import events
from governor.bus import Consumer
from governor.cores.aggregator import AggregatorCore, PolicyWindows
from governor.kafka_security import KafkaSecurity
from governor.window_sizes import WindowSettings

log = logging.getLogger("governor.aggregator")


class PolicyFollower:
    """Follows governor.policies into `core`; `ready` once the table was read to its end."""

    def __init__(
        self,
        core: AggregatorCore,
        defaults: WindowSettings,
        *,
        bootstrap: str,
        security: KafkaSecurity,
        client_id: str,
        source: events.PolicyOrigin,
        locked: Callable[[Callable[[], None]], Awaitable[None]],
        topic: events.Topic[events.PolicyRecord] = events.POLICIES,
    ) -> None:
        self.core = core
        self.table = PolicyWindows(defaults, source)
        self.locked = locked
        self.consumer = Consumer(
            bootstrap,
            [topic],
            group_id=None,
            client_id=client_id,
            security=security,
        )
        self.ready = asyncio.Event()
        self.stopping = False
        self.task: asyncio.Task[None] | None = None

    async def run(self, wait_seconds: float) -> None:
        """Read the table, then follow it until `stop` (a failure is retried: the windows
        must follow the policies for as long as the aggregator runs)."""
        self.task = asyncio.current_task()  # type: ignore[assignment]
        asyncio.get_running_loop().call_later(wait_seconds, self.give_up_waiting)
        while not self.stopping:
            try:
                await self.follow()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reading governor.policies failed: again in 5 s")
                await asyncio.sleep(5.0)

    async def follow(self) -> None:
        await self.consumer.start()
        client = self.consumer.client
        # Positions, not the offsets of records seen: compaction and transaction markers leave
        # gaps, so the last record read can stand before the end.
        end = await client.end_offsets(list(client.assignment()))
        while not self.stopping:
            messages = await self.consumer.poll(timeout_ms=500)
            changes: dict[str, WindowSettings | None] = {}
            for msg in messages:
                if msg.key is not None:
                    changes.update(self.table.on(msg.key, msg.value))
            if changes:
                await self.locked(functools.partial(self.apply, changes))
            if not self.ready.is_set() and await read_to(client, end):
                self.ready.set()  # after the changes above: the end's records are in the core

    def apply(self, changes: dict[str, WindowSettings | None]) -> None:
        for workload, sizes in changes.items():
            self.core.on_policy(workload, sizes)
        log.info("policy windows", extra={"workloads": len(changes)})

    def give_up_waiting(self) -> None:
        if not self.ready.is_set():
            log.warning("governor.policies not read yet: aggregating with the default windows")
            self.ready.set()

    async def stop(self) -> None:
        self.stopping = True
        if self.task is not None:  # out of its poll first: the consumer closes under it
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer.stop()


async def read_to(client: AIOKafkaConsumer, end: dict[TopicPartition, int]) -> bool:
    """Whether `client` has handed out every record before `end` on each partition."""
    for tp, offset in end.items():
        if await client.position(tp) < offset:
            return False
    return True
