"""governor.shell on a real broker: a record whose send fails while the broker is away is sent
once it is back (the actuator used to give up after 5 attempts and lose the Actuation)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from governor import events
from governor.bus import Consumer, Message, Producer
from governor.cores import Outputs
from governor.shell import KafkaSink, RoutingSink, run_core
from governor.topics import ensure_topics
from tests.fixtures.kafka import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

# Longer than the old loop's five attempts (sleeps 0.4 + 0.8 + 1.6 + 3.2 + 5 s and five send
# timeouts of SEND_TIMEOUT_MS), so the record only arrives if the sink keeps trying.
SEND_TIMEOUT_MS = 1500
DOWN_S = 5 * SEND_TIMEOUT_MS / 1000 + 11 + 10


class StopsTheBroker:
    """A core whose first answer takes the broker down with it (then waits `DOWN_S` and brings
    it back in the background): its Actuation is sent while no broker answers."""

    def __init__(self, broker: KafkaBroker) -> None:
        self.broker = broker
        self.calls = 0
        self.back: asyncio.Task[None] | None = None

    async def on(self, m: Message[events.ScaleDecision]) -> Outputs[events.Actuation]:
        self.calls += 1
        assert m.value is not None
        if self.back is None:
            await asyncio.to_thread(self.broker.stop)
            self.back = asyncio.create_task(self._restart())
        d = m.value
        act = events.Actuation(
            decision_id=d.decision_id, workload=d.workload, seq=d.seq, outcome="applied", reason="t"
        )
        return Outputs(records=[act])

    async def _restart(self) -> None:
        await asyncio.sleep(DOWN_S)
        await asyncio.to_thread(self.broker.start)

    def tick(self, now: float) -> Outputs[events.Actuation]:
        return Outputs()


async def test_an_actuation_sent_while_the_broker_is_down_arrives_when_it_is_back(
    kafka_restartable: KafkaBroker, unique_suffix: str
) -> None:
    bootstrap = kafka_restartable.bootstrap
    din = dataclasses.replace(events.DECISIONS, name=f"test.shell.d.{unique_suffix}", partitions=1)
    aout = dataclasses.replace(
        events.ACTUATIONS, name=f"test.shell.a.{unique_suffix}", partitions=1
    )
    await ensure_topics(bootstrap, [din, aout])
    feeder = Producer(bootstrap)
    await feeder.start()
    decision = events.ScaleDecision(
        decision_id=f"d-{unique_suffix}",
        workload="shop/Deployment/web",
        seq=1,
        from_replicas=1,
        to_replicas=3,
        reasons=[],
        inputs=[],
        policy_generation=1,
        newest_input=time.time(),
        decided_at=time.time(),
    )
    await feeder.send(din, decision)
    await feeder.stop()

    producer = Producer(bootstrap, request_timeout_ms=SEND_TIMEOUT_MS)
    await producer.start()
    consumer = Consumer(bootstrap, [din], group_id=None)
    await consumer.start()
    core = StopsTheBroker(kafka_restartable)

    def retries() -> float:
        labels = {"topic": aout.name}
        return REGISTRY.get_sample_value("governor_bus_emit_retries_total", labels) or 0.0

    before = retries()
    sent: list[Any] = []

    class Seen(KafkaSink[events.Actuation]):
        async def put(self, items: Any) -> None:
            await super().put(items)
            sent.extend(items)

    loop = asyncio.create_task(
        run_core(core, consumer, Seen(producer, aout), until=lambda: bool(sent))
    )
    try:
        await asyncio.wait_for(loop, DOWN_S + 300)
        assert core.back is not None
        await core.back
    finally:
        loop.cancel()
        await consumer.stop()
        await producer.stop()
    assert retries() > before + 5, "the send was not retried past the old 5 attempts"

    reader = Consumer(bootstrap, [aout], group_id=None)
    await reader.start()
    try:
        got: list[str] = []
        deadline = time.monotonic() + 60
        while decision.decision_id not in got and time.monotonic() < deadline:
            got += [m.value.decision_id for m in await reader.poll(500) if m.value is not None]
    finally:
        await reader.stop()
    assert decision.decision_id in got


async def test_a_routing_sink_sends_each_record_to_its_own_topic_in_order(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    """The decider's sink: decisions and shadow decisions are both ScaleDecisions, so the topic
    travels with each record; per topic (and key) the order given is the order read."""
    decisions, shadows = (
        dataclasses.replace(t, name=f"test.shell.route.{n}.{unique_suffix}", partitions=2)
        for t, n in ((events.DECISIONS, "d"), (events.SHADOW_DECISIONS, "s"))
    )
    await ensure_topics(kafka_bootstrap, [decisions, shadows])

    def decision(seq: int, workload: str) -> events.ScaleDecision:
        return events.ScaleDecision(
            decision_id=f"{workload}-{seq}", workload=workload, seq=seq, from_replicas=1,
            to_replicas=2, reasons=[], inputs=[], policy_generation=1, newest_input=0.0,
            decided_at=0.0,
        )  # fmt: skip

    items: list[Any] = []
    for seq in range(1, 31):
        for w in ("shop/Deployment/a", "shop/Deployment/b"):
            items.append((decisions if seq % 3 else shadows, decision(seq, w)))
    producer = Producer(kafka_bootstrap)
    await producer.start()
    try:
        await RoutingSink(producer).put(items)
    finally:
        await producer.stop()
    for topic in (decisions, shadows):
        want = [(w, s) for t, d in items if t is topic for w, s in [(d.workload, d.seq)]]
        reader = Consumer(kafka_bootstrap, [topic], group_id=None)
        await reader.start()
        try:
            got: list[tuple[str, int]] = []
            deadline = time.monotonic() + 60
            while len(got) < len(want) and time.monotonic() < deadline:
                got += [(m.value.workload, m.value.seq) for m in await reader.poll(500) if m.value]
        finally:
            await reader.stop()
        for w in ("shop/Deployment/a", "shop/Deployment/b"):
            assert [s for x, s in got if x == w] == [s for x, s in want if x == w], topic.name
        assert len(got) == len(want)
