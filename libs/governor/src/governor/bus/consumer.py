"""The typed consumer: manual commits after processing, a dead-letter queue, two loops (`run`,
`run_batches`), `poll` and `fetches()`, a `governor.shell` source of whole fetches (see the
package's docstring)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from prometheus_client import Counter

from governor.bus.codec import DeadLetter, Decoder, DlqReason, Message, dlq_headers
from governor.bus.connect import (
    Liveness,
    default_bootstrap,
    probe_partition,
    start_client,
    topic_partitions,
)
from governor.bus.producer import Producer
from governor.events import Topic
from governor.kafka_security import KafkaSecurity, aiokafka_options
from governor.retry import retrying

log = logging.getLogger("governor.bus")

DEAD_LETTERS = Counter(
    "governor_bus_dead_letters",
    "Messages sent to <topic>.dlq, by source topic and reason.",
    ["topic", "reason"],
)
CONSUMED = Counter(
    "governor_bus_consumed_messages",
    "Messages consumed and handed to a handler, by topic.",
    ["topic"],
)

Handler = Callable[[Message[Any]], Awaitable[None]]
BatchHandler = Callable[[list[Message[Any]]], Awaitable[None]]
PartitionsHook = Callable[[set[TopicPartition]], Awaitable[None]]


class _Revoker(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, consumer: Consumer) -> None:
        self._c = consumer

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        tps = set(revoked)
        if self._c.on_revoked is not None:
            await self._c.on_revoked(tps)
        await self._c._commit_partitions(tps)

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        tps = set(assigned)
        await self._c._commit_reset_points(tps)
        if self._c.on_assigned is not None:
            await self._c.on_assigned(tps)


class Consumer:
    """Typed consumer with manual commits after processing and a dead-letter queue.

    With `group_id=None` it reads every partition of its topics from the beginning and commits
    nothing: the shape of a global table (policies, workloads, cluster) that each decider reads
    in full.
    """

    def __init__(
        self,
        bootstrap: str | None,
        topics: Sequence[Topic[Any]],
        *,
        group_id: str | None,
        client_id: str = "governor",
        auto_offset_reset: Literal["earliest", "latest"] = "earliest",
        max_poll_records: int = 2000,
        dlq_producer: Producer | None = None,
        handler_errors: Literal["dlq", "raise"] = "dlq",
        check_keys: bool = True,
        start_timeout_s: float = 60.0,
        security: KafkaSecurity | None = None,
        on_assigned: PartitionsHook | None = None,
        on_revoked: PartitionsHook | None = None,
        before_commit: Callable[[], Awaitable[bool]] | None = None,
        **aiokafka_kwargs: Any,
    ) -> None:
        """`on_assigned`/`on_revoked` (group consumers): awaited inside a rebalance, before
        fetching resumes / before the revoked partitions' offsets are committed, so a service's
        state can follow its partitions. `before_commit`: awaited before each commit of new
        offsets; it writes what the commit must not get ahead of (a checkpoint) and returns
        whether to commit now (False: later, with more)."""
        if not topics:
            raise ValueError("Consumer needs at least one topic")
        self.on_assigned, self.on_revoked = on_assigned, on_revoked
        self._before_commit = before_commit
        self.bootstrap = bootstrap or default_bootstrap()
        self.group_id = group_id
        self.topics = list(topics)
        self._decoders: dict[str, Decoder[Any]] = {
            t.name: Decoder(t, check_keys) for t in self.topics
        }
        self.security = security
        self._options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            **aiokafka_options(security),
            "client_id": client_id,
            "group_id": group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": auto_offset_reset,
            "max_poll_records": max_poll_records,
            "isolation_level": "read_committed",
            # aiokafka leaves a partition whose records are still buffered out of the fetch in
            # flight; new records on it then wait for that fetch to return, which an idle topic
            # holds at the broker for up to this long (aiokafka's default 500 ms was most of the
            # decider's p99 at 1,000 workloads).
            "fetch_max_wait_ms": 100,
            **aiokafka_kwargs,
        }
        self._start_timeout_s = start_timeout_s
        self._consumer: AIOKafkaConsumer | None = None
        self._dlq = dlq_producer
        self._own_dlq = dlq_producer is None
        self._handler_errors = handler_errors
        # next offset to commit per partition: everything before it was processed (or DLQ'd)
        self._processed: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        # the first offset handed out per partition: where handling starts (for the lag while
        # nothing was processed there yet)
        self._first_fetched: dict[TopicPartition, int] = {}
        self._stopping = False
        self._running: asyncio.Event | None = None
        self._liveness = Liveness()
        self._probe: asyncio.Task[None] | None = None

    # lifecycle

    async def start(self) -> None:
        if self._consumer is not None:
            return
        if self._dlq is None:
            self._dlq = Producer(
                self.bootstrap,
                client_id=f"{self._options['client_id']}-dlq",
                security=self.security,
            )
        await self._dlq.start()

        def make() -> AIOKafkaConsumer:
            return AIOKafkaConsumer(**self._options)

        consumer = await start_client(make, "consumer", self.bootstrap, self._start_timeout_s)
        names = [t.name for t in self.topics]
        if self.group_id is None:
            tps = []
            for name in names:
                parts = await topic_partitions(consumer, name, self.bootstrap, self.security)
                tps += [TopicPartition(name, p) for p in sorted(parts)]
            consumer.assign(tps)
        else:
            consumer.subscribe(names, listener=_Revoker(self))
        self._consumer = consumer
        self._stopping = False
        self._liveness = Liveness()
        probe = self._liveness.run(lambda: probe_partition(consumer, names))
        self._probe = asyncio.create_task(probe, name="bus probe")

    @property
    def started(self) -> bool:
        return self._consumer is not None

    @property
    def ready(self) -> bool:
        """Started, not stopping, and a broker answered (records, a metadata probe) lately."""
        c = self._consumer
        return c is not None and not self._stopping and self._liveness.fresh

    def request_stop(self) -> None:
        """Ask `run()`/`run_batches()` to return after the message (batch) in hand; what was
        handled is committed on the way out. `stop()` then closes the consumer."""
        self._stopping = True

    async def stop(self) -> None:
        """Stop `run()`, commit what was processed, close (and flush the DLQ producer)."""
        self._stopping = True
        if self._running is not None:
            await self._running.wait()
        if self._probe is not None:
            self._probe.cancel()
            self._probe = None
        c, self._consumer = self._consumer, None
        try:
            if c is not None:
                try:
                    await self._commit(c)
                finally:
                    await c.stop()
        finally:
            if self._own_dlq and self._dlq is not None:
                await self._dlq.stop()
                self._dlq = None

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def partition_count(self, topic: str) -> int:
        """How many partitions `topic` has, from the metadata the consumer holds (0: unknown)."""
        return len(self._c().partitions_for_topic(topic) or ())

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        """Fetch nothing more of `tps` until `resume` (still assigned: no rebalance)."""
        self._c().pause(*tps)

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        """Fetch `tps` again, from where they were paused."""
        c = self._c()
        c.resume(*(tp for tp in tps if tp in c.assignment()))

    def handles(self, tp: TopicPartition) -> bool:
        """Whether records of `tp` fetched earlier may still be handled now: it is assigned and
        not paused. A partition revoked or paused since (its fetch predates the rebalance that
        gave it back, whose new position is its committed offset) is read again from there."""
        c = self._c()
        return self.group_id is None or (tp in c.assignment() and tp not in c.paused())

    def lag(self) -> dict[TopicPartition, int]:
        """Records between the next one to handle and the end (last stable offset of the latest
        fetch), per assigned partition; 0 where either is not known yet (nothing fetched). Not
        started: nothing is assigned, so nothing lags."""
        if self._consumer is None:
            return {}
        c = self._consumer
        out = {}
        for tp in c.assignment():
            end = c.last_stable_offset(tp)
            pos = self._processed.get(tp, self._first_fetched.get(tp))
            out[tp] = 0 if end is None or pos is None else max(0, end - pos)
        return out

    def _c(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("Consumer not started: await consumer.start() first")
        return self._consumer

    @property
    def client(self) -> AIOKafkaConsumer:
        """The started aiokafka consumer: its committed offsets, its seeks."""
        return self._c()

    # commits

    async def commit(self) -> None:
        """Commit everything processed so far (for poll() users: everything poll() returned)."""
        await self._commit(self._c())

    async def _commit(self, c: AIOKafkaConsumer) -> None:
        if self.group_id is None:
            return
        todo = {tp: off for tp, off in self._processed.items() if self._committed.get(tp) != off}
        if not todo:
            return
        assigned = c.assignment()
        todo = {tp: off for tp, off in todo.items() if tp in assigned}
        if not todo:
            return
        if self._before_commit is not None and not await self._before_commit():
            return
        await self._commit_offsets(c, todo)

    async def _commit_offsets(
        self, c: AIOKafkaConsumer, offsets: dict[TopicPartition, int]
    ) -> None:
        try:
            await c.commit(offsets)
            self._committed.update(offsets)
        except (CommitFailedError, IllegalStateError) as e:
            # A rebalance took partitions away: their new owner resumes from the last commit
            # (at-least-once), so this is not a loss.
            log.warning("commit of %s failed (%s); the new owner will redo them", offsets, e)

    async def _commit_partitions(self, tps: set[TopicPartition]) -> None:
        c = self._consumer
        if c is None or self.group_id is None:
            return
        todo = {
            tp: off
            for tp, off in self._processed.items()
            if tp in tps and self._committed.get(tp) != off
        }
        if todo:
            try:
                await c.commit(todo)
            except (CommitFailedError, IllegalStateError) as e:
                log.warning("commit on revoke failed (%s)", e)
        for tp in tps:
            self._processed.pop(tp, None)
            self._committed.pop(tp, None)
            self._first_fetched.pop(tp, None)

    # dead letters

    async def _dead_letter(self, rec: Any, reason: DlqReason, detail: str) -> None:
        """Send the raw record to `<topic>.dlq` with why, wait for the ack, count it."""
        dlq = self._dlq
        assert dlq is not None
        headers = dlq_headers(
            rec.headers or (), reason, detail, rec.topic, rec.partition, rec.offset
        )
        target = f"{rec.topic}.dlq"
        # Acked before the offset can be committed: a dead letter is never lost on the way.
        async for attempt in retrying(
            on=KafkaError, first_s=0.2, max_s=5.0, log=log, what=f"dead letter to {target}"
        ):
            with attempt:
                await (await dlq.send_raw(target, rec.value, key=rec.key, headers=headers))
        DEAD_LETTERS.labels(rec.topic, reason).inc()
        log.warning(
            "dead letter: %s[%d]@%d -> %s (%s: %s)",
            rec.topic,
            rec.partition,
            rec.offset,
            target,
            reason,
            detail[:200],
        )

    # reading

    async def _fetch(self, timeout_ms: int) -> list[tuple[TopicPartition, list[Any]]]:
        c = self._c()
        batches = await c.getmany(timeout_ms=timeout_ms)
        if batches:  # records came from a broker (an empty answer proves nothing: no raise)
            self._liveness.ok()
        start = {}
        for tp, records in batches.items():
            if records and tp not in self._first_fetched:
                self._first_fetched[tp] = records[0].offset
                if tp not in self._committed:
                    start[tp] = records[0].offset
        if start:
            await self._commit_start(c, start)
        return list(batches.items())

    async def _commit_reset_points(self, tps: set[TopicPartition]) -> None:
        """With `latest`, a partition the group never committed starts at its end. Commit that
        end (and read from it) at assignment: the first-fetch commit below comes too late for a
        member killed while its `on_assigned` hook still ran (a decider reading its checkpoint
        table), and its successor would start at a later end, past what came meanwhile."""
        c = self._consumer
        if c is None or self.group_id is None or self._options["auto_offset_reset"] != "latest":
            return
        new = [tp for tp in tps if await c.committed(tp) is None]
        if not new:
            return
        ends = await c.end_offsets(new)
        for tp, end in ends.items():
            c.seek(tp, end)
        await self._commit_offsets(c, ends)

    async def _commit_start(self, c: AIOKafkaConsumer, start: dict[TopicPartition, int]) -> None:
        """Commit where reading starts on a newly assigned partition, before anything of it is
        handled. A new group starts at `auto_offset_reset`; without this commit a member killed
        before its first commit of processed offsets restarts at the reset point again, and with
        `latest` the records published meanwhile were never read (a decider killed in its first
        seconds lost its windows). Committing the start never gets ahead of the handling."""
        if self.group_id is not None:
            await self._commit_offsets(c, start)

    async def _decode_partition(self, tp: TopicPartition, records: list[Any]) -> list[Message[Any]]:
        """Decode one partition's records in order; dead-letter the bad ones. The hot path is
        inlined: this loop is most of the bus's cost per message."""
        dec = self._decoders[tp.topic]
        decode = dec._decode
        key_of = dec._key if dec._check_key else None
        expected = dec._expected_headers
        topic, partition = tp.topic, tp.partition
        out: list[Message[Any]] = []
        append = out.append
        for rec in records:
            raw = rec.value
            kb = rec.key
            if raw is not None and kb is not None and rec.headers == expected:
                try:
                    value = decode(raw)
                    key = kb.decode()
                except (msgspec.DecodeError, UnicodeDecodeError):
                    pass  # the slow path below says why
                else:
                    if key_of is None or key_of(value) == key:
                        append(Message(topic, partition, rec.offset, key, value, rec.timestamp))
                        continue
            try:
                append(dec(rec))
            except DeadLetter as dl:
                # Not marked processed here: good messages before it may still be unhandled.
                # The caller marks the batch once its handler got through it.
                await self._dead_letter(rec, dl.reason, dl.detail)
        return out

    async def poll(self, timeout_ms: int = 1000) -> list[Message[Any]]:
        """The next decoded messages, partition by partition in offset order (bad ones are
        already dead-lettered). Everything returned counts as processed for the next commit()."""
        out: list[Message[Any]] = []
        for tp, records in await self._fetch(timeout_ms):
            good = await self._decode_partition(tp, records)
            out += good
            if records:
                self._processed[tp] = records[-1].offset + 1
            if good:
                CONSUMED.labels(tp.topic).inc(len(good))
        return out

    async def run(self, handler: Handler, *, poll_timeout_ms: int = 500) -> None:
        """Handle messages one at a time until stop(); commit after each fetched batch."""

        async def per_partition(
            tp: TopicPartition, msgs: list[Message[Any]], records: list[Any]
        ) -> None:
            processed = self._processed
            for msg in msgs:
                if self._stopping:
                    return
                try:
                    await handler(msg)
                except Exception as e:
                    await self.handler_failed(msg, records, e)
                processed[tp] = msg.offset + 1
            processed[tp] = records[-1].offset + 1  # dead letters after the last good one

        await self._loop(per_partition, poll_timeout_ms)

    async def run_batches(self, handler: BatchHandler, *, poll_timeout_ms: int = 500) -> None:
        """Handle each partition's fetched messages as one list (in offset order) until stop().

        If the handler raises, the batch is retried one message at a time so that only the
        failing messages are dead-lettered (the handler must tolerate the repeat, as every
        at-least-once handler must)."""

        async def per_partition(
            tp: TopicPartition, msgs: list[Message[Any]], records: list[Any]
        ) -> None:
            try:
                await handler(msgs)
            except Exception:
                for msg in msgs:
                    try:
                        await handler([msg])
                    except Exception as e:
                        await self.handler_failed(msg, records, e)
                    self._processed[tp] = msg.offset + 1
            self._processed[tp] = records[-1].offset + 1

        await self._loop(per_partition, poll_timeout_ms)

    def fetches(self) -> Fetches:
        """This consumer as a `governor.shell.Source` of whole fetches (see `Fetch`)."""
        return Fetches(self)

    async def fetch(self, timeout_ms: int) -> Fetch | None:
        """The next fetch, decoded (bad records already dead-lettered), or None when it held
        nothing. Nothing counts as processed until `Fetch.handle`/`handle_each` got through it,
        so a fetch in hand is never committed ahead of its handler."""
        c = self._c()
        parts: list[tuple[TopicPartition, list[Message[Any]], list[Any]]] = []
        for tp, records in await self._fetch(timeout_ms):
            if self._stopping:
                break
            if self.group_id is not None and tp not in c.assignment():
                continue  # revoked meanwhile: the new owner redoes it
            if records:
                parts.append((tp, await self._decode_partition(tp, records), records))
        return Fetch(self, parts) if parts else None

    async def handler_failed(self, msg: Message[Any], records: list[Any], e: Exception) -> None:
        """`msg` (one of the fetched `records`) made its handler raise: dead-letter it (reason
        `handler`), or re-raise with `handler_errors="raise"`."""
        if self._handler_errors == "raise":
            raise e
        rec = next(r for r in records if r.offset == msg.offset)
        log.error("handler failed on %s[%d]@%d", rec.topic, rec.partition, rec.offset, exc_info=e)
        await self._dead_letter(rec, "handler", f"{type(e).__name__}: {e}")

    async def _loop(
        self,
        per_partition: Callable[[TopicPartition, list[Message[Any]], list[Any]], Awaitable[None]],
        poll_timeout_ms: int,
    ) -> None:
        if self._running is not None:
            raise RuntimeError("run() is already running on this consumer")
        self._running = asyncio.Event()
        try:
            c = self._c()
            while not self._stopping:
                for tp, records in await self._fetch(poll_timeout_ms):
                    if self._stopping:
                        break
                    if self.group_id is not None and tp not in c.assignment():
                        continue  # revoked meanwhile: the new owner redoes it
                    good = await self._decode_partition(tp, records)
                    if good:
                        await per_partition(tp, good, records)
                        CONSUMED.labels(tp.topic).inc(len(good))
                    elif records:
                        self._processed[tp] = records[-1].offset + 1  # all dead-lettered
                await self._commit(c)
            await self._commit(c)
        finally:
            self._running.set()
            self._running = None


@dataclass
class Fetch:
    """One fetch of a consumer: each partition's decoded messages beside its raw records. Its
    handler marks it processed (the next commit covers it) once it got through it."""

    consumer: Consumer
    parts: list[tuple[TopicPartition, list[Message[Any]], list[Any]]]

    @property
    def messages(self) -> list[Message[Any]]:
        """Every partition's messages, each partition's in offset order, one after another."""
        return [m for _, good, _ in self.parts for m in good]

    def _live(self) -> None:
        """Drop the partitions a rebalance took (or paused) since the fetch: not handled, not
        marked processed, so their offsets are not committed past what was handled."""
        self.parts = [p for p in self.parts if self.consumer.handles(p[0])]

    async def handle(self, handler: BatchHandler) -> None:
        """One call with every message, so a handler whose cost is per call (acknowledgements it
        waits for) pays it once per fetch. If it raises, each message is retried alone and only
        the failing ones are dead-lettered (`Consumer.run_batches`' rule)."""
        self._live()
        c, processed = self.consumer, self.consumer._processed
        msgs = self.messages
        if msgs:
            try:
                await handler(msgs)
            except Exception:
                for tp, good, records in self.parts:
                    for msg in good:
                        try:
                            await handler([msg])
                        except Exception as e:
                            await c.handler_failed(msg, records, e)
                        processed[tp] = msg.offset + 1
        self._done()

    async def handle_each(self, handler: Handler) -> None:
        """One call per message (`Consumer.run`'s rule: a raising one is dead-lettered)."""
        self._live()
        c, processed = self.consumer, self.consumer._processed
        for tp, good, records in self.parts:
            for msg in good:
                try:
                    await handler(msg)
                except Exception as e:
                    await c.handler_failed(msg, records, e)
                processed[tp] = msg.offset + 1
        self._done()

    def _done(self) -> None:
        processed = self.consumer._processed
        for tp, good, records in self.parts:
            processed[tp] = records[-1].offset + 1  # dead letters after the last good one
            if good:
                CONSUMED.labels(tp.topic).inc(len(good))


class Fetches:
    """A consumer as a `governor.shell.Source`: `poll` hands out the next fetch as one record
    (or none), `commit` commits what the handled fetches covered."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    async def poll(self, timeout_ms: int) -> list[Fetch]:
        fetch = await self.consumer.fetch(timeout_ms)
        return [fetch] if fetch is not None else []

    async def commit(self) -> None:
        await self.consumer.commit()
