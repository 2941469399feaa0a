"""governor-actuator: consume governor.decisions, patch Kubernetes, publish governor.actuations.

    governor-actuator [--config FILE]      (or GOVERNOR_ACTUATOR_CONFIG=FILE)

Each poll (all assigned partitions) is grouped by workload: one workload's decisions run in
offset order, different workloads concurrently. Offsets are committed after the batch's Actuation
records were acknowledged by Kafka (at-least-once; replays are refused as stale by the fence).
ScalingPolicy status and Events are written by background writers, off the decision's path.
SIGTERM/SIGINT: finish the batch in hand, commit, write queued status/Events, flush, close.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

from governor import bus
from governor.events import ACTUATIONS, DECISIONS, Actuation, ScaleDecision, Topic
from governor.kube import Kube, KubeError, connect
from governor.settings import ConfigError
from governor.telemetry import HealthServer, configure_logging
from governor_actuator.actuator import Actuator
from governor_actuator.config import ActuatorSettings, load

log = logging.getLogger("governor.actuator")


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
        self.producer = bus.Producer(s.kafka.bootstrap, client_id=f"{s.kafka.client_id}-actuator")
        await self.producer.start()
        self.consumer = bus.Consumer(
            s.kafka.bootstrap,
            [self.decisions],
            group_id=s.group_id,
            client_id=f"{s.kafka.client_id}-actuator",
            dlq_producer=self.producer,
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

    async def handle_batch(self, messages: list[bus.Message[Any]]) -> None:
        """One partition's batch: per workload in order, workloads concurrently."""
        assert self.actuator is not None and self.producer is not None
        lanes: dict[str, list[ScaleDecision]] = defaultdict(list)
        for m in messages:
            if m.value is not None:
                lanes[m.value.workload].append(m.value)
        acks: list[asyncio.Future[Any]] = []

        async def lane(decisions: list[ScaleDecision]) -> None:
            assert self.actuator is not None and self.producer is not None
            for d in decisions:
                actuation = await self.actuator.handle(d)
                acks.append(await self.producer.publish(self.actuations, actuation))

        await asyncio.gather(*(lane(ds) for ds in lanes.values()))
        await asyncio.gather(*acks)

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
        """Poll, handle, commit, until `request_stop()`."""
        assert self.consumer is not None and self.actuator is not None
        watcher = asyncio.create_task(self._watch_kube(self.actuator.kube))
        try:
            while not self._stopping:
                messages = await self.consumer.poll(timeout_ms=100)
                if messages:
                    await self.handle_batch(messages)
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="governor-actuator", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--config", type=Path, help="YAML/JSON config (else GOVERNOR_ACTUATOR_CONFIG)"
    )
    args = parser.parse_args(argv)
    try:
        settings = load(args.config)
    except ConfigError as e:
        raise SystemExit(f"governor-actuator: {e}") from None
    configure_logging("actuator", settings.log_level)
    if not settings.allowed_namespaces:
        log.warning("allowed_namespaces is empty: every decision will be refused")
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
