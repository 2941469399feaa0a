"""governor-actuator: consume governor.decisions, patch Kubernetes, publish governor.actuations.

    governor-actuator [--config FILE]      (or GOVERNOR_ACTUATOR_CONFIG=FILE)

The loop is `governor.shell.run_core` with lanes: a workload's decisions run in offset order,
different workloads concurrently, and the reader keeps polling while lanes work (at most
`max_in_flight` decisions queued). Offsets are committed only when every polled decision was
handled and its Actuation acknowledged by Kafka (a send that fails is retried until the broker
takes it: the audit record is never dropped): whenever the lanes are idle, and at least every
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
from typing import Any

from governor import bus, lifecycle
from governor.cores import Outputs
from governor.entry import service_settings
from governor.events import ACTUATIONS, DECISIONS, Actuation, ScaleDecision, Topic
from governor.kube import Kube, KubeError, connect
from governor.shell import KafkaSink, run_core
from governor.telemetry import HealthServer, configure_logging
from governor_actuator.actuator import Actuator
from governor_actuator.config import PREFIX, ActuatorSettings

log = logging.getLogger("governor.actuator")


class Actuate:
    """The actuator as a `run_core` core: a decision in, its Actuation out (`Actuator.handle`
    makes the reads `governor.cores.actuator.decide` asks for, then the patch)."""

    def __init__(self, actuator: Actuator) -> None:
        self.actuator = actuator

    async def on(self, m: bus.Message[ScaleDecision]) -> Outputs[Actuation]:
        if m.value is None:
            return Outputs()
        return Outputs(records=[await self.actuator.handle(m.value)])

    def tick(self, now: float) -> Outputs[Actuation]:
        return Outputs()


def lane_of(m: bus.Message[ScaleDecision]) -> str:
    """A workload's decisions run in offset order, different workloads concurrently."""
    return m.value.workload if m.value is not None else ""


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
        assert self.producer is not None
        watcher = asyncio.create_task(self._watch_kube(self.actuator.kube))
        try:
            await run_core(
                Actuate(self.actuator),
                self.consumer,
                KafkaSink(self.producer, self.actuations),
                until=lambda: self._stopping,
                lanes=lane_of,
                max_in_flight=self.settings.max_in_flight,
                commit_every_s=self.settings.commit_interval_seconds,
            )
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


def start(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Run the service with the settings `args` name (parsed by governor_actuator.cli)."""
    settings = service_settings(parser, args, ActuatorSettings, PREFIX)
    configure_logging("actuator", settings.log_level)
    if not settings.allowed_namespaces:
        log.warning("allowed_namespaces is empty: every decision will be refused")
    asyncio.run(lifecycle.serve(Service(settings), log))
