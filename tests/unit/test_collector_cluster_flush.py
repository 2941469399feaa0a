"""The collector's flush loop: a burst of changes to one key is coalesced, the rate per key is
bounded, and the last message holds the final state (fake producer, no I/O)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgspec

from governor.cores.cluster import Watched
from governor.cores.cluster_flush import Started
from governor.events import NodeState, Topic
from governor.inventory import Node
from governor_collector.cluster.collector import ClusterCollector, ClusterCollectorSettings


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    async def publish(self, topic: Topic[Any], value: Any) -> asyncio.Future[None]:
        self.sent.append((topic.name, topic.key(value), value))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def send_raw(self, topic: str, value: None, *, key: bytes, headers: Any) -> Any:
        self.sent.append((topic, key.decode(), None))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


def node(cpu: int) -> Node:
    return msgspec.convert(
        {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": str(cpu)}}}, Node
    )


async def test_churn_is_coalesced_and_rate_bounded() -> None:
    c = ClusterCollector(ClusterCollectorSettings(coalesce_ms=200, leader_election=False))
    producer = FakeProducer()
    c.producer = producer  # type: ignore[assignment]
    loop_task = asyncio.create_task(c.flush_loop())
    try:
        c.inbox.put(Watched("node", "n1", None, node(1)))
        await asyncio.sleep(0.5)
        assert producer.sent == [], "nothing is sent before start-up is over"
        c.inbox.put(Started())
        await asyncio.sleep(0.5)
        assert len(producer.sent) == 1
        # 100 changes of one node within ~1 s
        start = asyncio.get_running_loop().time()
        for i in range(100):
            c.inbox.put(Watched("node", "n1", None, node(2 + i)))
            await asyncio.sleep(0.01)
        elapsed = asyncio.get_running_loop().time() - start
        await asyncio.sleep(0.5)
        churn = producer.sent[1:]
        assert 1 <= len(churn) <= elapsed / 0.2 + 2, len(churn)
        last = churn[-1][2]
        assert isinstance(last, NodeState) and last.allocatable == {"cpu": 101.0}
        # a change back and forth inside one coalescing window: no message at all
        before = len(producer.sent)
        c.inbox.put(Watched("node", "n1", None, node(5)))
        c.inbox.put(Watched("node", "n1", None, node(101)))
        await asyncio.sleep(0.5)
        assert len(producer.sent) == before
    finally:
        loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop_task
