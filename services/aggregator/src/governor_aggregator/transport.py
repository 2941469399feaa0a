"""faust's aiokafka transport with a cheaper hand-off of each fetched message to the streams,
a shorter fetch wait, and the records of each stream partition delivered in order across
rebalances.

faust-streaming 0.15.3 (pinned) delivers every fetched message through
`Service.wait_first(callback(message), suspend_flow.wait())`: four tasks, an `asyncio.wait` and
three cancellations per message, so that a rebalance (`suspend_flow`) can interrupt a delivery
that is blocked. Measured in the aggregator at 1,000 samples/s, that hand-off was a quarter of
the worker's main thread, more than faust's whole stream path.

A delivery can only block when flow control is suspended (a rebalance), a destination queue is
full, or faust's producer buffer is over its limit. When none of those holds, the callback runs
to completion without suspending, so awaiting it directly is the same as racing it against
events that cannot fire meanwhile. Otherwise the message takes faust's own path.

Before either, a record of a stream partition must be the next one in order (`StreamOrder`:
faust 0.15.3 can deliver records from before a rebalance's seek after it). Everything else in
the loop is faust's `Consumer._drain_messages`, unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Literal, cast

from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode import Service, ServiceT

# How long a fetch may wait at the broker for data. faust fixes it at 1.5 s: aiokafka leaves a
# partition whose records are still buffered out of the fetch in flight, so a sample arriving on
# it just after that fetch was sent waited for the fetch to come back, up to 1.5 s (a p99 of
# 0.7 s at 1,000 samples/s). An idle worker now sends ten empty fetches a second instead.
FETCH_MAX_WAIT_MS = 100


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer


class Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    # In-order delivery of the stream partitions across rebalances (StreamOrder says why).
    def _order(self) -> StreamOrder:
        order: StreamOrder | None = self.__dict__.get("_governor_order")
        if order is None:
            order = self.__dict__["_governor_order"] = StreamOrder()
        return order

    def resume_partitions(self, tps: Any) -> None:
        tps = set(tps)
        self._order().resumed(tp for tp in tps if not self._is_changelog_tp(tp))
        super().resume_partitions(tps)

    async def perform_seek(self) -> None:
        order = self._order()
        pending = set(order.unsought)
        await super().perform_seek()
        # faust's read offset after a seek is the committed offset: the next one to deliver.
        streams = [tp for tp in self.assignment() if not self._is_changelog_tp(tp)]
        order.sought(pending, {tp: self._read_offset.get(tp) for tp in streams})

    async def _close_gap(self, tp: Any, offset: int) -> bool:
        """The record at `offset` of stream partition `tp` is ahead of the next one: whether to
        deliver it all the same (the records in between expired) or to seek back."""
        order = self._order()
        expected = order.next[tp]
        assert expected is not None
        earliest = (await self.earliest_offsets(tp)).get(tp)
        if earliest is not None and earliest > expected:
            self.log.warning("%s: offsets %d..%d expired unread", tp, expected, offset - 1)
            order.expired(tp, offset)
            return True
        self.log.info("%s: record %d ahead of %d: seeking back", tp, offset, expected)
        await self.seek(tp, order.seeking_back(tp))
        return False

    async def _drain_messages(self, fetcher: ServiceT) -> None:  # pragma: no cover - faust's loop
        callback = self.callback
        getmany = self.getmany
        consumer_should_stop = cast(Service, self)._stopped.is_set
        fetcher_should_stop = cast(Service, fetcher)._stopped.is_set

        get_read_offset = self._read_offset.__getitem__
        set_read_offset = self._read_offset.__setitem__
        flag_consumer_fetching = CONSUMER_FETCHING
        set_flag = self.diag.set_flag
        unset_flag = self.diag.unset_flag
        commit_every = self._commit_every
        acks_enabled_for = self.app.topics.acks_enabled_for

        app = self.app
        flow_active = app.flow_control.is_active
        suspended = self.suspend_flow.is_set
        crashed = cast(Service, self)._crashed.is_set
        tp_index: Any = app.topics._tp_index  # type: ignore[attr-defined]
        producer_buffer = app.producer.buffer
        # ProducerBuffer.size reads faust's settings on every call; the buffer is not threaded.
        pending: Any = producer_buffer.pending._queue  # type: ignore[attr-defined]

        def can_block(tp: Any) -> bool:
            if suspended() or not flow_active() or consumer_should_stop() or crashed():
                return True
            if len(pending) > producer_buffer.max_messages:
                return True
            return any(chan.queue.full() for chan in tp_index.get(tp, ()))

        order_step = self._order().step
        close_gap = self._close_gap
        is_stream: dict[Any, bool] = {}

        def stream_tp(tp: Any) -> bool:
            stream = is_stream.get(tp)
            if stream is None:
                stream = is_stream[tp] = not self._is_changelog_tp(tp)
            return stream

        yield_every = 100
        num_since_yield = 0
        sleep = asyncio.sleep

        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(flag_consumer_fetching)
                ait = getmany(timeout=1.0)
                await self.sleep(0)
                if not self.should_stop:
                    async for tp, message in ait:
                        num_since_yield += 1
                        if num_since_yield > yield_every:
                            await sleep(0)
                            num_since_yield = 0

                        offset = message.offset
                        if stream_tp(tp):
                            step = order_step(tp, offset)
                            if step == "skip":
                                continue
                            if step == "gap" and not await close_gap(tp, offset):
                                continue
                        r_offset = get_read_offset(tp)
                        if r_offset is None or offset >= r_offset:
                            gap = offset - (r_offset or 0)
                            if gap > 1 and r_offset and acks_enabled_for(message.topic):
                                await self._add_gap(tp, r_offset + 1, offset)
                            if commit_every is not None and self._n_acked >= commit_every:
                                self._n_acked = 0
                                await self.commit()
                            if not can_block(tp):
                                # A turn of the loop first, so that a rebalance callback posted
                                # from the consumer thread runs before this delivery, as it
                                # would during faust's wait_first.
                                await sleep(0)
                            if can_block(tp):
                                await self.wait_first(callback(message), self.suspend_flow.wait())
                            else:
                                await callback(message)
                            set_read_offset(tp, offset)
                    unset_flag(flag_consumer_fetching)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            unset_flag(flag_consumer_fetching)


Step = Literal["deliver", "skip", "gap"]


class StreamOrder:
    """Which record of a stream partition to deliver next, across rebalances.

    After a rebalance faust resumes the stream partitions and only then seeks them to their
    committed offsets, with the flow already running (it ran for the table recovery); and a fetch
    that the consumer thread answered before the seek can reach the drain loop after it. Either
    way records come from where the worker had fetched to before the rebalance: past some that
    were fetched and then dropped when the rebalance cleared the stream buffers. faust delivers
    them (it takes the jump as a compacted topic's gap), then the records the seek fetches again,
    and the aggregator's per-series offset check skipped those as duplicates: samples lost, 1
    run in ~20 of test_aggregator_rebalance under load.

    So from a seek on the next offset of each stream partition is known. A partition resumed but
    not yet sought delivers nothing; a record behind the next offset is a duplicate; one ahead of
    it is a gap: the consumer seeks the partition back to the next offset and skips what comes
    until that record arrives, unless retention deleted the records in between, when the jump is
    taken (nothing can bring them back). Bookkeeping only; the consumer does the I/O.
    """

    def __init__(self) -> None:
        self.next: dict[Any, int | None] = {}  # None: whatever comes first
        self.unsought: set[Any] = set()
        self.reseek: dict[Any, int] = {}

    def resumed(self, tps: Iterable[Any]) -> None:
        self.unsought.update(tps)

    def sought(self, tps: Iterable[Any], positions: Mapping[Any, int | None]) -> None:
        """`tps` were sought; `positions` is the next offset of every stream partition now."""
        self.unsought.difference_update(tps)
        self.next = dict(positions)
        self.reseek.clear()

    def step(self, tp: Any, offset: int) -> Step:
        if tp in self.unsought:
            return "skip"
        expected = self.next.get(tp)
        if expected is None or offset == expected:
            self.next[tp] = offset + 1
            self.reseek.pop(tp, None)
            return "deliver"
        if offset < expected or self.reseek.get(tp) == expected:
            return "skip"  # a duplicate, or ahead while the records in between are on their way
        return "gap"

    def seeking_back(self, tp: Any) -> int:
        """The gap at `tp` is being closed by a seek: to this offset."""
        expected = self.next[tp]
        assert expected is not None
        self.reseek[tp] = expected
        return expected

    def expired(self, tp: Any, offset: int) -> None:
        """The records before `offset` are gone: deliver from it on."""
        self.next[tp] = offset + 1
        self.reseek.pop(tp, None)


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer
