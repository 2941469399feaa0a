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
fetches), and a core's `on`/`tick` may be coroutines where the step awaits what it must (a
partition hook holding the same state, the actuator's reads).

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
    "Published",
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


class Published:
    """The sink of a core that publishes as it goes (the decider's: each cycle's checkpoints
    acknowledged before its records, pool by pool): it must be handed nothing."""

    async def put(self, items: Sequence[object]) -> None:
        if items:
            raise ValueError(f"this core publishes its own records; {len(items)} left over")


class KafkaSink(Generic[Out]):
    """Records to one topic. `put` publishes them all, waits for the acks (one round trip) and
    re-sends what failed with backoff (`first_s` doubling to `max_s`) until the broker took it:
    it never returns with a record unsent."""

    def __init__(
        self, producer: Producer, topic: Topic[Any], *, first_s: float = 0.2, max_s: float = 5.0
    ) -> None:
        self.producer, self.topic = producer, topic
        self.first_s, self.max_s = first_s, max_s

    async def put(self, items: Sequence[Out]) -> None:
        if not items:
            return
        await retry.retrying(
            on=SEND_ERRORS,
            first_s=self.first_s,
            max_s=self.max_s,
            log=log,
            what=lambda: f"{len(items)} record(s) to {self.topic.name} not acknowledged",
            level=logging.ERROR,
        )(self._send_all, items)

    async def _send_all(self, items: Sequence[Out]) -> None:
        try:
            acks = [await self.producer.publish(self.topic, item) for item in items]
            await self.producer.wait(acks)
        except SEND_ERRORS:
            EMIT_RETRIES.labels(self.topic.name).inc()
            raise


async def deliver(
    out: Outputs[Out], outputs: Sink[Out], checkpoints: Sink[Out] | None = None
) -> None:
    """Checkpoints acknowledged first, then the records."""
    if out.checkpoints:
        if checkpoints is None:
            raise ValueError("the core returned checkpoints and the shell has no checkpoint sink")
        await checkpoints.put(out.checkpoints)
    await outputs.put(out.records)


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
) -> None:
    """Consume → core → deliver (checkpoints, then records) → commit, until `until()`; then
    finish what is in hand and commit it. `tick_s`: also `core.tick(now)` that often."""
    if lanes is not None:
        await _run_lanes(
            core, inputs, outputs, checkpoints, until, poll_ms, lanes, max_in_flight, commit_every_s
        )
        return
    last_tick = time.monotonic()
    while not until():
        out: Outputs[Out] = Outputs()
        records = await inputs.poll(poll_ms)
        for record in records:
            out += await _answer(core, record)
        if tick_s is not None and time.monotonic() - last_tick >= tick_s:
            out += await _tick(core, time.time())
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
