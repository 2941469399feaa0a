"""governor-actuator: consume governor.decisions, patch Kubernetes, publish governor.actuations.

    governor-actuator [--config FILE]      (or GOVERNOR_ACTUATOR_CONFIG=FILE)

Decisions go to one lane per workload: a workload's decisions run in offset order, different
workloads concurrently, and the reader keeps polling while lanes work (at most `max_in_flight`
decisions queued). Offsets are committed only when every polled decision was handled and its
Actuation acknowledged by Kafka: whenever the lanes are idle, and at least every
`commit_interval_seconds` (the reader pauses until the lanes drain). At-least-once: a crash
redelivers, and the fence refuses replays as stale. ScalingPolicy status and Events are written
by background writers, off the decision's path.
SIGTERM/SIGINT: stop polling, finish the lanes, commit, write queued status/Events, flush, close.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from governor import bus
from governor.entry import service_settings
from governor.events import ACTUATIONS, DECISIONS, Actuation, ScaleDecision, Topic
from governor.kube import Kube, KubeError, connect
from governor.telemetry import HealthServer, configure_logging
from governor_actuator.actuator import Actuator
from governor_actuator.config import PREFIX, ActuatorSettings

log = logging.getLogger("governor.actuator")


class Lanes:
    """One sequential lane per workload; lanes run concurrently; at most `limit` queued."""

    def __init__(self, work: Callable[[ScaleDecision], Awaitable[None]], limit: int) -> None:
        self._work = work
        self._room = asyncio.Semaphore(limit)
        self._queues: dict[str, deque[ScaleDecision]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()

    async def submit(self, decision: ScaleDecision) -> None:
        await self._room.acquire()
        self.in_flight += 1
        self.idle.clear()
        key = decision.workload
        self._queues.setdefault(key, deque()).append(decision)
        if key not in self._tasks:
            self._tasks[key] = asyncio.create_task(self._drain(key))

    async def _drain(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue:
                decision = queue.popleft()
                try:
                    await self._work(decision)
                except Exception:
                    log.exception("lane %s: %s failed", key, decision.decision_id)
                finally:
                    self.in_flight -= 1
                    self._room.release()
                    if self.in_flight == 0:
                        self.idle.set()
        finally:
            del self._tasks[key], self._queues[key]


class Service:
    """The actuator process: Kafka in, Kubernetes, Kafka out."""

    def __init__(self, settings: ActuatorSettings) -> None:
        self.settings = settings
        self.decisions: Topic[ScaleDecision] = dataclasses.replace(
            DECISIONS, name=settings.decisions_topic
        )
        self.actuations: Topic[Actuation] = dataclasses.replace(
            ACTUATIONS, name=settings.actuations_topic
        )
        self._api: Any = None
        self.actuator: Actuator | None = None
        self.producer: bus.Producer | None = None
        self.consumer: bus.Consumer | None = None
        self.health: HealthServer | None = None
        self._kube_ok = False
        self.lanes = Lanes(self._actuate, settings.max_in_flight)
        self._stopping = False
        self._stopped = asyncio.Event()

    def ready(self) -> bool:
        return bool(
            self._kube_ok
            and self.producer is not None
            and self.producer.ready
            and self.consumer is not None
            and self.consumer.ready
        )

    async def start(self) -> None:
        s = self.settings
        self.health = HealthServer(s.http.host, s.http.port, self.ready)
        port = await self.health.start()
        self._api = await connect(s.kubeconfig)
        kube = Kube(self._api, timeout_s=s.request_timeout_seconds)
        try:
            await kube.request("GET", "/version")
            self._kube_ok = True
        except KubeError as e:
            log.warning("API server not answering yet: %s", e)
        self.actuator = Actuator(kube, s)
        self.producer = bus.Producer(
            s.kafka.bootstrap,
            client_id=f"{s.kafka.client_id}-actuator",
            security=s.kafka.security,
        )
        await self.producer.start()
        self.consumer = bus.Consumer(
            s.kafka.bootstrap,
            [self.decisions],
            group_id=s.group_id,
            client_id=f"{s.kafka.client_id}-actuator",
            dlq_producer=self.producer,
            security=s.kafka.security,
        )
        await self.consumer.start()
        log.info(
            "actuator started: %s -> %s, namespaces %s, kinds %s, dry_run=%s, http :%d",
            s.decisions_topic,
            s.actuations_topic,
            sorted(s.allowed_namespaces),
            sorted(s.allowed_kinds),
            s.dry_run,
            port,
        )

    async def _actuate(self, decision: ScaleDecision) -> None:
        """One decision: Kubernetes, then its Actuation record, acknowledged by Kafka."""
        assert self.actuator is not None and self.producer is not None
        actuation = await self.actuator.handle(decision)
        for attempt in range(1, 6):
            try:
                await self.producer.send(self.actuations, actuation)
                return
            except Exception as e:  # the broker is away: retry, then say so loudly
                log.error(
                    "actuation record for %s not acknowledged (%s), attempt %d",
                    decision.decision_id,
                    e,
                    attempt,
                    extra={"workload": decision.workload, "decision_id": decision.decision_id},
                )
                await asyncio.sleep(min(5.0, 0.2 * 2**attempt))

    async def _watch_kube(self, kube: Kube, every_s: float = 10.0) -> None:
        """Readiness follows the API server: GET /version every `every_s`."""
        while True:
            try:
                await kube.request("GET", "/version")
                if not self._kube_ok:
                    log.info("API server answers")
                self._kube_ok = True
            except KubeError as e:
                if self._kube_ok:
                    log.warning("API server not answering: %s", e)
                self._kube_ok = False
            await asyncio.sleep(every_s)

    async def run(self) -> None:
        """Poll into the lanes and commit what they finished, until `request_stop()`."""
        assert self.consumer is not None and self.actuator is not None
        watcher = asyncio.create_task(self._watch_kube(self.actuator.kube))
        interval = self.settings.commit_interval_seconds
        last_commit, uncommitted = time.monotonic(), False
        try:
            while not self._stopping:
                if uncommitted and time.monotonic() - last_commit > interval:
                    await self.lanes.idle.wait()  # pause reading so the commit can catch up
                if uncommitted and self.lanes.idle.is_set():
                    await self.consumer.commit()
                    last_commit, uncommitted = time.monotonic(), False
                messages = await self.consumer.poll(timeout_ms=100)
                for m in messages:
                    if m.value is not None:
                        await self.lanes.submit(m.value)
                uncommitted = uncommitted or bool(messages)
            await self.lanes.idle.wait()
            await self.consumer.commit()
        finally:
            watcher.cancel()
            self._stopped.set()

    def request_stop(self) -> None:
        self._stopping = True

    async def stop(self) -> None:
        """After `run()` returned (or never started): drain, commit, close everything."""
        self._stopping = True
        if self.actuator is not None:
            await self.actuator.drain()
        if self.consumer is not None:
            await self.consumer.stop()
        if self.producer is not None:
            await self.producer.stop()
        if self._api is not None:
            await self._api.close()
        if self.health is not None:
            await self.health.stop()
        log.info("actuator stopped")


async def serve(settings: ActuatorSettings) -> None:
    service = Service(settings)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner: asyncio.Task[None] | None = None
    waiter = asyncio.create_task(stop.wait())
    try:
        await service.start()
        runner = asyncio.create_task(service.run())
        done, _ = await asyncio.wait({runner, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if runner in done:
            runner.result()  # the loop ended by itself: raise what ended it
        log.info("signal received: finishing the batch in hand")
        service.request_stop()
        try:
            await asyncio.wait_for(runner, timeout=30)
        except TimeoutError:
            log.warning("the batch in hand did not finish within 30s")
    finally:
        waiter.cancel()
        await service.stop()


def start(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Run the service with the settings `args` name (parsed by governor_actuator.cli)."""
    settings = service_settings(parser, args, ActuatorSettings, PREFIX)
    configure_logging("actuator", settings.log_level)
    if not settings.allowed_namespaces:
        log.warning("allowed_namespaces is empty: every decision will be refused")
    asyncio.run(serve(settings))
