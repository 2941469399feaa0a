"""`governor-collector`: metric sources publishing samples to Kafka.

Reads the ScalingPolicies from `governor.policies`, runs one source per policy metric
(`sources/`), publishes MetricSamples to `governor.metrics`, accepts pushed samples on
`POST /v1/samples`, and serves `/metrics`, `/healthz` and `/readyz` (ready = the Kafka producer
is connected and the policies table is loaded). SIGTERM: stop taking pushes, let in-flight
requests and polls finish, flush the producer, exit 0. Several collectors with the same group
split the pull sources between them (`share`).

The loop is `governor.shell.run_core`: the pollers and the push endpoint publish through
`kafka.Offers` into its inbox, the core (`governor.cores.collector`) answers each offer with its
delivery, and `kafka.DeliverySink` publishes it and answers the caller; offers run concurrently
(one lane each), so the producer batches the samples of concurrent ones per partition.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import signal
import ssl
from collections.abc import Sequence
from pathlib import Path

from governor.bus import Producer
from governor.cores.collector import CollectorCore, Offered
from governor.entry import service_settings
from governor.kube import Kube, connect
from governor.push_auth import Caller
from governor.shell import Inbox, run_core
from governor.telemetry import HealthServer, configure_logging
from governor_collector.config import PREFIX, CollectorSettings
from governor_collector.kafka import BusPublisher, DeliverySink, Offers
from governor_collector.openapi import openapi_route
from governor_collector.policies import PolicyTable
from governor_collector.push_auth import AuthUnavailable, KubeAuth, PushAuth, TokensFileAuth
from governor_collector.scheduler import Scheduler
from governor_collector.share import SourceShare
from governor_collector.sources import SourceContext
from governor_collector.sources.push import PUSH_HUB, PushHub, push_routes

log = logging.getLogger("governor_collector")

# offers published at once (pushes and polls waiting on the broker); beyond it a caller waits
MAX_OFFERS_IN_FLIGHT = 10_000


class Collector:
    """The service, startable and stoppable in-process (tests use it as it runs in production)."""

    def __init__(self, settings: CollectorSettings) -> None:
        self.settings = settings
        self.producer = Producer(
            settings.kafka.bootstrap,
            client_id=settings.kafka.client_id,
            start_timeout_s=settings.start_timeout_seconds,
            security=settings.kafka.security,
        )
        metrics_topic, policies_topic = settings.topics()
        self.publisher = BusPublisher(self.producer, metrics_topic)
        self.inbox: Inbox[Offered[asyncio.Future[None]]] = Inbox()
        self.offers = Offers(self.inbox)
        self._loop: asyncio.Task[None] | None = None
        self._draining = False  # set once no poll or push can offer anything more
        self.ctx = SourceContext(options={"kubeconfig": settings.kubeconfig})
        self.hub = PushHub()
        self.ctx.resources[PUSH_HUB] = self.hub
        self.scheduler = Scheduler(
            self.ctx, self.offers, stop_grace_s=settings.shutdown_timeout_seconds
        )
        self.policies = PolicyTable(
            settings.kafka.bootstrap,
            self.scheduler.apply,
            topic=policies_topic,
            client_id=f"{settings.kafka.client_id}-policies",
            start_timeout_s=settings.start_timeout_seconds,
            security=settings.kafka.security,
        )
        self.share = SourceShare(settings, self.producer, self.scheduler)
        self._stopping = False
        self._kube_api: object = None
        self.auth = _DeferredAuth()
        if settings.push_auth == "tokens_file" and settings.push_tokens_file:
            self.auth.use(TokensFileAuth.load(Path(settings.push_tokens_file)))
        self.server = HealthServer(
            settings.http_host,
            settings.http_port,
            self.ready,
            extra_routes=[
                *push_routes(
                    self.offers,
                    self.hub,
                    max_body_bytes=settings.push_max_body_bytes,
                    accepting=lambda: not self._stopping,
                    auth=None if settings.push_auth == "none" else self.auth,
                ),
                openapi_route(auth=settings.push_auth != "none"),
            ],
            ssl_context=_tls(settings),
        )

    @property
    def port(self) -> int:
        return self.server.port

    def ready(self) -> bool:
        return not self._stopping and self.producer.ready and self.policies.loaded

    async def start(self) -> None:
        if self.settings.push_auth == "kubernetes":
            self._kube_api = await connect(self.settings.kubeconfig)
            self.auth.use(KubeAuth(Kube(self._kube_api), self.settings.push_token_audiences))
        await self.producer.start()
        self._loop = asyncio.create_task(self._run(), name="collector loop")
        await self.policies.start()
        await self.share.start()
        await self.server.start()
        log.info(
            "collector serving on %s:%d (Kafka %s)",
            self.settings.http_host,
            self.port,
            self.settings.kafka.bootstrap,
        )

    async def _run(self) -> None:
        await run_core(
            CollectorCore(),
            self.inbox,
            DeliverySink(self.publisher),
            until=lambda: self._draining,
            lanes=lambda offer: offer.lane,
            max_in_flight=MAX_OFFERS_IN_FLIGHT,
            commit_every_s=math.inf,  # the inbox has nothing to commit: never pause reading
        )

    async def stop(self) -> None:
        """Graceful: no new pushes, in-flight ones finish and are acknowledged, polls finish,
        then the producer flushes what it holds."""
        if self._stopping:
            return
        self._stopping = True
        log.info("collector stopping")
        await self.server.stop()  # waits for in-flight requests (their sends are acked)
        await self.policies.stop()
        await self.share.stop()
        await self.scheduler.close()
        self._draining = True  # the loop publishes what it holds, then returns
        if self._loop is not None:
            await self._loop
        await self.ctx.close()
        await self.producer.stop()  # flushes
        close = getattr(self._kube_api, "close", None)
        if close is not None:
            await close()
        log.info("collector stopped")


class _DeferredAuth:
    """The configured authenticator, known once the collector started (the API client is made
    in the running loop); until then every push is refused as unavailable."""

    def __init__(self) -> None:
        self.inner: PushAuth | None = None

    def use(self, inner: PushAuth) -> None:
        self.inner = inner

    def _get(self) -> PushAuth:
        if self.inner is None:
            raise AuthUnavailable("the collector is starting")
        return self.inner

    async def authenticate(self, token: str) -> Caller | None:
        return await self._get().authenticate(token)

    async def may_push(self, caller: Caller, namespaces: Sequence[str]) -> dict[str, bool]:
        return await self._get().may_push(caller, namespaces)


def _tls(settings: CollectorSettings) -> ssl.SSLContext | None:
    if not settings.http_tls_cert_file or not settings.http_tls_key_file:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(settings.http_tls_cert_file, settings.http_tls_key_file)
    return ctx


async def run(settings: CollectorSettings) -> None:
    collector = Collector(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await collector.start()
    try:
        await stop.wait()
    finally:
        await collector.stop()


def start(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Run the service with the settings `args` name (parsed by governor_collector.cli)."""
    settings = service_settings(parser, args, CollectorSettings, PREFIX)
    configure_logging("collector", settings.log_level)
    try:
        asyncio.run(run(settings))
    except ConnectionError as e:
        log.error("cannot start: %s", e)
        raise SystemExit(1) from None
