"""The collector's Kafka output: samples to `governor.metrics` through governor's typed bus."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from governor.bus import Producer
from governor.events import METRICS, MetricSample, Topic


class PublishError(RuntimeError):
    """Kafka did not acknowledge every sample of a publish."""


class BusPublisher:
    """`Publisher` over `governor.bus.Producer`: key = workload, value = msgspec JSON, the bus's
    headers; `publish` returns once the broker acknowledged every sample (acks=all)."""

    def __init__(self, producer: Producer, topic: Topic[MetricSample] = METRICS) -> None:
        self.producer = producer
        self.topic = topic

    async def publish(self, samples: Sequence[MetricSample]) -> None:
        futures = [await self.producer.publish(self.topic, s) for s in samples]
        if not futures:
            return
        results = await asyncio.gather(*futures, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise PublishError(
                f"{len(failed)} of {len(samples)} samples not acknowledged: {failed[0]!r}"
            ) from failed[0]
