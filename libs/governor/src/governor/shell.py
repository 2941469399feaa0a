"""The one shell loop of a service: consume → core → persist checkpoints → emit records → commit.

A service is settings, metrics and a `run_core(core, inputs, outputs, tick_s)` call:

- `inputs` is any `Source`: `poll()` the next records (a Kafka consumer, a Kubernetes watch, a
  poller; `Inbox` for what callbacks hand in), `commit()` what was handed out once its outputs
  are safe;
- the core (`governor.cores.Core`) answers each record (`on`) and the clock (`tick`) with
  `Outputs`: the checkpoints to persist and the records to publish;
- `outputs` (and `checkpoints`) is any `Sink`: `put()` returns once every item is acknowledged
  (a Kafka producer's acks, a Kubernetes patch).

The order is the rule: a step's checkpoints are acknowledged before its records go out, and the
input is committed only after both, so a crash anywhere redelivers rather than loses. A sink
never gives up: `KafkaSink` retries a send with capped backoff (a log line and
`governor_bus_emit_retries` per retry) until the broker acknowledges it, and the commit waits.

`merged(a, b, ...)` makes several inputs one (the decider: its global tables beside its group's
fetches), and a core's `on`/`tick` may be coroutines where the step awaits what it must (the
actuator's reads). `lock`: held while a step is answered and delivered, so a partition hook
holding the same state (the decider's rebalance) finds a step either not begun or delivered.
A step's `Outputs` may be ordered rounds (`Outputs.then`): `deliver` acknowledges each round's
checkpoints, then its records, then calls its `after` hooks, before the next round. A core
writing to several topics returns `(topic, value)` pairs for a `RoutingSink`.

`lanes` runs the records of different keys concurrently (one sequential lane per key, at most
`max_in_flight` queued), committing whenever the lanes are idle and at least every
`commit_every_s` (reading pauses until they drain): the actuator's shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from aiokafka.errors import KafkaError
from prometheus_client import Counter

from governor import retry
from governor.bus import Producer
from governor.cores import Core, Outputs
from governor.events import Topic

log = logging.getLogger("governor.shell")

In = TypeVar("In")
In_co = TypeVar("In_co", covariant=True)
Out = TypeVar("Out")
Out_contra = TypeVar("Out_contra", contravariant=True)

EMIT_RETRIES = Counter(
    "governor_bus_emit_retries",
    "Sends a sink retried because the broker did not acknowledge them, by topic.",
    ["topic"],
)

# what a send raises while the broker is away or slow (a bug, e.g. a bad record, is not retried)
SEND_ERRORS = (KafkaError, OSError, TimeoutError)

__all__ = [
    "EMIT_RETRIES",
    "Inbox",
    "KafkaSink",
    "Lanes",
    "Merged",
    "Routed",
    "RoutingSink",
    "Sink",
    "Source",
    "deliver",
    "merged",
    "run_core",
]


class Source(Protocol[In_co]):
    """Where a core's records come from."""

    async def poll(self, timeout_ms: int) -> Sequence[In_co]: ...

    async def commit(self) -> None: ...


class Inbox(Generic[In]):
    """An in-process source: what callbacks `put` (a watch's events, an HTTP handler's
    records), handed out in order by `poll`; there is nothing to commit."""

    def __init__(self) -> None:
        self._items: deque[In] = deque()
        self._ready = asyncio.Event()

    def put(self, item: In) -> None:
        self._items.append(item)
        self._ready.set()

    def empty(self) -> bool:
        """Nothing is waiting: what was put has been handed out (and, as `run_core` answers a
        poll's records without yielding in between, taken by a synchronous core)."""
        return not self._items

    async def poll(self, timeout_ms: int) -> Sequence[In]:
        if not self._items and timeout_ms > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), timeout_ms / 1000)
        items = list(self._items)
        self._items.clear()
        self._ready.clear()
        return items

    async def commit(self) -> None:
        return None


class Merged(Generic[In]):
    """Several sources as one. `poll` takes what the first ones hold without waiting, and waits
    up to `timeout_ms` only on the last (the busiest: the one worth waiting on) and only when
    the others held nothing; `commit` commits each source that handed out records since."""

    def __init__(self, *sources: Source[In]) -> None:
        if not sources:
            raise ValueError("merged() needs at least one source")
        self.sources = sources
        self._handed: set[int] = set()

    async def poll(self, timeout_ms: int) -> Sequence[In]:
        out: list[In] = []
        last = len(self.sources) - 1
        for i, source in enumerate(self.sources):
            got = await source.poll(0 if out or i < last else timeout_ms)
            if got:
                self._handed.add(i)
                out += got
        return out

    async def commit(self) -> None:
        handed, self._handed = self._handed, set()
        for i in sorted(handed):
            await self.sources[i].commit()


def merged(*sources: Source[In]) -> Merged[In]:
    """`sources` as one `Source` (see `Merged`)."""
    return Merged(*sources)


class Sink(Protocol[Out_contra]):
    """Where a core's outputs go: `put` returns once every item is acknowledged."""

    async def put(self, items: Sequence[Out_contra]) -> None: ...


class _RetryingSink:
    """`put` sends every item and waits for the acks (one round trip), re-sending with backoff
    (`first_s` doubling to `max_s`) until the broker took them all: it never returns with an
    item unsent."""

    def __init__(self, producer: Producer, *, first_s: float = 0.2, max_s: float = 5.0) -> None:
        self.producer, self.first_s, self.max_s = producer, first_s, max_s

    def _topics(self, items: Sequence[Any]) -> list[str]:
        raise NotImplementedError

    async def _send(self, items: Sequence[Any]) -> None:
        raise NotImplementedError

    async def put(self, items: Sequence[Any]) -> None:
        if not items:
            return
        # The first send outside the retry machinery: a tenacity loop leaves ~27 objects in
        # reference cycles per call, which the decider's raised young-generation threshold
        # (governor.gc_tuning) let pile up, many puts a second (+10 MiB over a minute).
        try:
            await self._send_counted(items)
            return
        except SEND_ERRORS as e:
            log.error("%d record(s) to %s not acknowledged (%s); retrying", len(items),
                      ", ".join(self._topics(items)), e)  # fmt: skip
        await asyncio.sleep(self.first_s)
        await retry.retrying(
            on=SEND_ERRORS,
            first_s=self.first_s,
            max_s=self.max_s,
            log=log,
            what=lambda: (
                f"{len(items)} record(s) to {', '.join(self._topics(items))} not acknowledged"
            ),
            level=logging.ERROR,
        )(self._send_counted, items)

    async def _send_counted(self, items: Sequence[Any]) -> None:
        try:
            await self._send(items)
        except SEND_ERRORS:
            for topic in self._topics(items):
                EMIT_RETRIES.labels(topic).inc()
            raise


class KafkaSink(_RetryingSink, Generic[Out]):
    """Records to one topic, each sent alone (`Producer.publish`)."""

    def __init__(
        self, producer: Producer, topic: Topic[Any], *, first_s: float = 0.2, max_s: float = 5.0
    ) -> None:
        super().__init__(producer, first_s=first_s, max_s=max_s)
        self.topic = topic

    def _topics(self, items: Sequence[Any]) -> list[str]:
        return [self.topic.name]

    async def _send(self, items: Sequence[Any]) -> None:
        acks = [await self.producer.publish(self.topic, item) for item in items]
        await self.producer.wait(acks)


Routed = tuple[Topic[Any], Any]
"""A record and the topic it goes to (a core writing to several topics)."""


class RoutingSink(_RetryingSink):
    """Records each to its own topic: per topic in the order first met, in one record batch per
    partition (`Producer.publish_many`: a decider cycle's thousands of recommendations cost a
    fraction of a send each), every topic's acks awaited together."""

    def _topics(self, items: Sequence[Routed]) -> list[str]:
        return list(dict.fromkeys(topic.name for topic, _ in items))

    async def _send(self, items: Sequence[Routed]) -> None:
        by_topic: dict[str, tuple[Topic[Any], list[Any]]] = {}
        for topic, value in items:
            held = by_topic.get(topic.name)
            if held is None:
                held = by_topic[topic.name] = (topic, [])
            held[1].append(value)
        acks = []
        for topic, values in by_topic.values():
            acks += await self.producer.publish_many(topic, values)
        await self.producer.wait(acks)


async def deliver(
    out: Outputs[Out], outputs: Sink[Out], checkpoints: Sink[Out] | None = None
) -> None:
    """Round by round: the checkpoints acknowledged, then the records, then the hooks."""
    for step in out.rounds() if out.later else (out,):
        if step.checkpoints:
            if checkpoints is None:
                raise ValueError("the core returned checkpoints and there is no checkpoint sink")
            await checkpoints.put(step.checkpoints)
        await outputs.put(step.records)
        for hook in step.after:
            try:
                hook()
            except Exception:  # a metric's bug must not stop delivery, nor the service
                log.exception("a hook after delivery failed")


async def _answer(core: Core[In, Out], record: In) -> Outputs[Out]:
    out = core.on(record)
    return await out if inspect.isawaitable(out) else out


async def _tick(core: Core[In, Out], now: float) -> Outputs[Out]:
    out = core.tick(now)
    return await out if inspect.isawaitable(out) else out


class Lanes(Generic[In]):
    """One sequential lane per key; lanes run concurrently; at most `limit` queued."""

    def __init__(
        self, work: Callable[[In], Awaitable[None]], key: Callable[[In], str], limit: int
    ) -> None:
        self._work, self._key = work, key
        self._room = asyncio.Semaphore(limit)
        self._queues: dict[str, deque[In]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()

    async def submit(self, record: In) -> None:
        await self._room.acquire()
        self.in_flight += 1
        self.idle.clear()
        key = self._key(record)
        self._queues.setdefault(key, deque()).append(record)
        if key not in self._tasks:
            self._tasks[key] = asyncio.create_task(self._drain(key))

    async def _drain(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue:
                record = queue.popleft()
                try:
                    await self._work(record)
                except Exception:
                    log.exception("lane %s: a record failed", key)
                finally:
                    self.in_flight -= 1
                    self._room.release()
                    if self.in_flight == 0:
                        self.idle.set()
        finally:
            del self._tasks[key], self._queues[key]


async def run_core(
    core: Core[In, Out],
    inputs: Source[In],
    outputs: Sink[Out],
    tick_s: float | None = None,
    *,
    checkpoints: Sink[Out] | None = None,
    until: Callable[[], bool] = lambda: False,
    poll_ms: int = 100,
    lanes: Callable[[In], str] | None = None,
    max_in_flight: int = 1000,
    commit_every_s: float = 5.0,
    lock: asyncio.Lock | None = None,
) -> None:
    """Consume → core → deliver (checkpoints, then records) → commit, until `until()`; then
    finish what is in hand and commit it. `tick_s`: also `core.tick(now)` that often, once the
    records' outputs are delivered (a tick's work does not hold up decisions on new input).
    `lock`: held over each answer and its delivery, and each tick and its delivery (not with
    `lanes`, whose records are answered concurrently)."""
    if lanes is not None:
        await _run_lanes(
            core, inputs, outputs, checkpoints, until, poll_ms, lanes, max_in_flight, commit_every_s
        )
        return
    held = lock if lock is not None else contextlib.nullcontext()
    last_tick = time.monotonic()
    while not until():
        records = await inputs.poll(poll_ms)
        async with held:
            out: Outputs[Out] = Outputs()
            for record in records:
                out += await _answer(core, record)
            await deliver(out, outputs, checkpoints)
        if tick_s is not None and time.monotonic() - last_tick >= tick_s:
            async with held:
                out = await _tick(core, time.time())
                last_tick = time.monotonic()  # tick_s from the end of one tick to the next
                await deliver(out, outputs, checkpoints)
        if records:
            await inputs.commit()


async def _run_lanes(
    core: Core[In, Out],
    inputs: Source[In],
    outputs: Sink[Out],
    checkpoints: Sink[Out] | None,
    until: Callable[[], bool],
    poll_ms: int,
    key: Callable[[In], str],
    max_in_flight: int,
    commit_every_s: float,
) -> None:
    async def work(record: In) -> None:
        await deliver(await _answer(core, record), outputs, checkpoints)

    lanes = Lanes(work, key, max_in_flight)
    last_commit, uncommitted = time.monotonic(), False
    while not until():
        if uncommitted and time.monotonic() - last_commit > commit_every_s:
            await lanes.idle.wait()  # pause reading so the commit can catch up
        if uncommitted and lanes.idle.is_set():
            await inputs.commit()
            last_commit, uncommitted = time.monotonic(), False
        records = await inputs.poll(poll_ms)
        for record in records:
            await lanes.submit(record)
        uncommitted = uncommitted or bool(records)
    await lanes.idle.wait()
    await inputs.commit()
