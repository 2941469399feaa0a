"""The collector's Kafka output: samples to `governor.metrics` as MetricBatch records.

Every source's poll and every push hands its samples to `BusPublisher.publish`. Samples are
gathered for `linger_s` (from the first one of a flush) and then written as ONE MetricBatch record
per partition (the partition of each sample's workload, as the default partitioner computes it,
so per-workload order is that of single samples), at most `max_samples` per record. `publish`
returns once the broker acknowledged the records holding its samples (acks=all), so a push is
answered, and a poll counted, only after its samples are durable.

The pollers and the push endpoint do not call it directly: they publish through `Offers`, into
`governor.shell.run_core` (the core: `governor.cores.collector`), whose sink (`DeliverySink`)
calls it and answers each caller.

Why: the aggregator's per-record cost (faust's delivery of each message) was most of its CPU;
a batch pays it once for hundreds of samples.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

from governor.bus import Producer, codec_for
from governor.cores.collector import Offered
from governor.events import METRICS, MetricSample, Topic
from governor.metric_records import Partitions, batch_key, encode_batch
from governor.shell import Inbox


class PublishError(RuntimeError):
    """Kafka did not acknowledge every sample of a publish."""


class BusPublisher:
    """`Publisher` over `governor.bus.Producer`: batches per partition (module docstring)."""

    def __init__(
        self,
        producer: Producer,
        topic: Topic[MetricSample] = METRICS,
        *,
        linger_s: float = 0.02,
        max_samples: int = 1000,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.linger_s = linger_s
        self.max_samples = max_samples
        self._headers = codec_for(topic).header_list
        self._partitions: Partitions | None = None
        self._pending: dict[int, list[MetricSample]] = {}
        self._flushed: asyncio.Future[None] | None = None
        self.records = 0  # batch records written (the bench reads it)
        self._flushes: set[asyncio.Task[None]] = set()  # held until done (the loop keeps weak refs)

    async def publish(self, samples: Sequence[MetricSample]) -> None:
        if not samples:
            return
        if self._partitions is None:
            self._partitions = Partitions(await self.producer.partition_count(self.topic.name))
        of = self._partitions.of
        pending = self._pending
        for s in samples:
            part = of(s.workload)
            group = pending.get(part)
            if group is None:
                group = pending[part] = []
            group.append(s)
        flushed = self._flushed
        if flushed is None:
            loop = asyncio.get_running_loop()
            flushed = self._flushed = loop.create_future()
            loop.call_later(self.linger_s, self._start_flush, flushed)
        await asyncio.shield(flushed)

    def _start_flush(self, flushed: asyncio.Future[None]) -> None:
        pending, self._pending, self._flushed = self._pending, {}, None
        task = asyncio.ensure_future(self._flush(pending, flushed))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flush(
        self, pending: dict[int, list[MetricSample]], flushed: asyncio.Future[None]
    ) -> None:
        try:
            acks = []
            for part, samples in pending.items():
                key = batch_key(part).encode()
                for i in range(0, len(samples), self.max_samples):
                    value = encode_batch(part, samples[i : i + self.max_samples])
                    acks.append(
                        await self.producer.send_raw(
                            self.topic.name, value, key=key, headers=self._headers, partition=part
                        )
                    )
            results = await asyncio.gather(*acks, return_exceptions=True)
            self.records += len(acks)
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:
                raise PublishError(
                    f"{len(failed)} of {len(acks)} batch records not acknowledged: {failed[0]!r}"
                ) from failed[0]
        except Exception as e:
            flushed.set_exception(e if isinstance(e, PublishError) else PublishError(repr(e)))
            flushed.exception()  # retrieved here too: a flush nobody waits for is not an error
        else:
            flushed.set_result(None)

    async def flush(self) -> None:
        """Wait for what is gathered to be written (at most one linger)."""
        if self._flushed is not None:
            await asyncio.shield(self._flushed)


class Offers:
    """The `Publisher` the pollers and the push endpoint use: each publish is an `Offered`
    into `run_core`'s inbox, and returns once the sink answered its ticket (the broker
    acknowledged every sample) or raises what it answered instead."""

    def __init__(self, inbox: Inbox[Offered[asyncio.Future[None]]]) -> None:
        self.inbox = inbox
        self._lanes = itertools.count()

    async def publish(self, samples: Sequence[MetricSample]) -> None:
        if not samples:
            return
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # its own lane: offers are published concurrently, as the callers wait on them
        self.inbox.put(Offered(samples, ticket, str(next(self._lanes))))
        await ticket


class DeliverySink:
    """`run_core`'s sink: an offer's samples to the topic (`BusPublisher`, which batches the
    concurrent ones per partition), then its ticket answered: done, or the failure, which the
    caller reports (a push answers 503, a poll counts a publish error)."""

    def __init__(self, publisher: BusPublisher) -> None:
        self.publisher = publisher

    async def put(self, items: Sequence[Offered[asyncio.Future[None]]]) -> None:
        for offer in items:
            try:
                await self.publisher.publish(offer.samples)
            except Exception as e:  # the caller's to report, not the loop's
                if not offer.ticket.done():
                    offer.ticket.set_exception(e)
            else:
                if not offer.ticket.done():
                    offer.ticket.set_result(None)
