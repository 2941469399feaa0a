"""The decider's restore of an assignment's checkpoints (governor_decider.restorer), on the real
broker: read outside the rebalance, so a read longer than the session timeout keeps the member
in its group (issue 19: the read inside the assigned callback emptied the group, round and
round), and no record of a new partition is handled before the restore handed its state over.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from governor import events
from governor.bus import Consumer, Message, Producer
from governor.topics import describe_topics, ensure_topics
from governor_decider.restorer import Restorer
from tests.integration.test_bus import _decision, renamed
from tests.support.waiting import eventually, wait_for

pytestmark = pytest.mark.integration

SESSION_MS = 6_000  # the broker's group.min.session.timeout.ms


class Member:
    """A group member with a Restorer whose read takes `read_s`: what it was assigned, what it
    applied (when), and when it handled each record."""

    def __init__(self, bootstrap: str, topic: events.Topic[Any], group: str, read_s: float):
        self.read_s = read_s
        self.assigned: list[set[TopicPartition]] = []
        self.applied: list[tuple[float, set[TopicPartition]]] = []
        self.handled: list[tuple[float, Message[Any]]] = []
        self.consumer = Consumer(
            bootstrap,
            [topic],
            group_id=group,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=1_000,
            on_assigned=self._assigned,
            on_revoked=self._revoked,
        )
        self.restorer: Restorer[str] = Restorer(self.consumer, self._read, self._apply)
        self.task: asyncio.Task[None] | None = None
        self.stopping = False

    async def _assigned(self, tps: set[TopicPartition]) -> None:
        self.assigned.append(set(tps))
        await self.restorer.assigned(tps)

    async def _revoked(self, tps: set[TopicPartition]) -> None:
        await self.restorer.revoked(tps)

    async def _read(self) -> str:
        await asyncio.sleep(self.read_s)
        return "checkpoints"

    async def _apply(self, tps: set[TopicPartition], got: str) -> None:
        assert got == "checkpoints"
        self.applied.append((time.monotonic(), set(tps)))

    async def _handle(self, batch: list[Message[Any]]) -> None:
        now = time.monotonic()
        self.handled += [(now, m) for m in batch]

    async def _run(self) -> None:
        while not self.stopping:
            fetch = await self.consumer.fetch(200)
            if fetch is not None:
                await fetch.handle(self._handle)
            await self.consumer.commit()

    async def start(self) -> None:
        await self.consumer.start()
        self.task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self.stopping = True
        if self.task is not None:
            await self.task
        await self.restorer.cancel()
        await self.consumer.stop()

    def handled_before_applied(self) -> list[Message[Any]]:
        """Records handled while their partition's latest restore (by then) was not applied."""
        out = []
        for at, msg in self.handled:
            done = [tps for t, tps in self.applied if t <= at]
            tp = TopicPartition(msg.topic, msg.partition)
            if not done or tp not in done[-1]:
                out.append(msg)
        return out


async def group_members(bootstrap: str, group: str) -> tuple[str, int]:
    """The group's state and member count, as the broker's coordinator has them."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (resp,) = await admin.describe_consumer_groups([group])
        (desc,) = resp.to_object()["groups"]
        return desc["state"], len(desc["members"])
    finally:
        await admin.close()


async def test_a_read_longer_than_the_session_keeps_the_member_and_holds_its_records(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    t = renamed(events.DECISIONS, f"test.restore.{unique_suffix}", partitions=2)
    await ensure_topics(kafka_bootstrap, [t])
    async with Producer(kafka_bootstrap) as p:
        for _ in range(20):
            await p.publish(t, _decision())
        await p.flush()
    group = f"restore-{unique_suffix}"
    member = Member(kafka_bootstrap, t, group, read_s=2.5 * SESSION_MS / 1e3)
    await member.start()
    try:
        await wait_for(lambda: len(member.handled) >= 20, 60, "the records after the restore")
        await asyncio.sleep(2 * SESSION_MS / 1e3)  # a member dropped would rejoin meanwhile
        # The broker's view: a read inside the callback (no heartbeats until it returns) had it
        # "failed, removing it from the group" a session after the assignment, the group Empty.
        assert await group_members(kafka_bootstrap, group) == ("Stable", 1)
    finally:
        await member.stop()
    # One assignment: the coordinator never removed the member while it read.
    assert len(member.assigned) == 1, member.assigned
    assert [tps for _, tps in member.applied] == member.assigned
    assert member.handled_before_applied() == []
    assert len({(m.partition, m.offset) for _, m in member.handled}) == len(member.handled) == 20


async def test_a_rebalance_during_a_restore_cancels_it_and_the_next_one_takes_over(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    t = renamed(events.DECISIONS, f"test.restore2.{unique_suffix}", partitions=4)
    await ensure_topics(kafka_bootstrap, [t])
    group = f"restore2-{unique_suffix}"
    first = Member(kafka_bootstrap, t, group, read_s=4.0)
    second = Member(kafka_bootstrap, t, group, read_s=0.5)
    await first.start()
    try:
        await wait_for(lambda: bool(first.assigned), 30, "the first assignment")
        await second.start()  # the first member is still reading: its restore is cancelled
        await wait_for(
            lambda: len(first.assigned) >= 2 and first.applied and second.applied,
            60,
            "both restores after the rebalance",
        )
        async with Producer(kafka_bootstrap) as p:
            for i in range(40):  # over every partition: both members handle some
                d = msgspec.structs.replace(_decision(), workload=f"ns/Deployment/w{i}")
                await p.publish(t, d)
            await p.flush()
        await wait_for(
            lambda: len(first.handled) + len(second.handled) >= 40, 60, "every record handled"
        )
    finally:
        await first.stop()
        await second.stop()
    # The first restore (all four partitions) never handed anything over.
    assert all(tps != first.assigned[0] for _, tps in first.applied), first.applied
    assert first.applied[-1][1] == first.assigned[-1]
    assert first.assigned[-1].isdisjoint(second.assigned[-1])
    for m in (first, second):
        assert m.handled_before_applied() == []
    assert first.handled and second.handled
    assert len(first.handled) + len(second.handled) == 40


async def test_the_checkpoint_topic_rolls_its_segments_even_when_it_existed_before(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    # A broker whose checkpoint topic was created before the table said `segment.ms` gets it set.
    old = renamed(events.DECIDER_STATE, f"test.segments.{unique_suffix}", segment_ms=None)
    await ensure_topics(kafka_bootstrap, [old])
    new = renamed(events.DECIDER_STATE, f"test.segments.{unique_suffix}")
    actions = await ensure_topics(kafka_bootstrap, [new])
    assert any(a.startswith(f"set {new.name} configs") for a in actions), actions

    async def rolls() -> None:  # a broker may answer from metadata a moment older than the set
        (d, _dlq) = await describe_topics(kafka_bootstrap, [new], with_counts=False)
        assert d.configs["segment.ms"] == "60000" and d.problems == []

    await eventually(rolls, within_s=10)
