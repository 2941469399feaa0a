"""The adapter process: governor.load in, external.metrics.k8s.io out (see the package doc)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import Counter

from governor import bus, lifecycle
from governor import external_metrics as em
from governor.entry import service_settings
from governor.events import LOAD, LoadWindow, Topic
from governor.front_proxy import front_proxy_trust, is_front_proxy, server_context
from governor.kube import Kube, connect
from governor.telemetry import HealthServer, configure_logging
from governor.windows import views
from governor_metrics_adapter.config import PREFIX, MetricsAdapterSettings

log = logging.getLogger("governor.metrics_adapter")

REQUESTS = Counter(
    "governor_metrics_adapter_requests",
    "external.metrics.k8s.io requests, by outcome (served, empty, rejected, invalid).",
    ["outcome"],
)

ROOT = f"/apis/{em.GROUP_VERSION}"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def status(code: int, reason: str, message: str) -> web.Response:
    """A Kubernetes Status object, as the API server relays it to the caller."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
            "message": message, "code": code}  # fmt: skip
    return web.json_response(body, status=code)


class Adapter:
    """The HTTP side: the front-proxy check, discovery, one metric's value list."""

    def __init__(self, history: em.WindowHistory, default_delay: float) -> None:
        self.history = history
        self.default_delay = default_delay
        self.allowed_names: frozenset[str] = frozenset()

    @web.middleware
    async def front_proxy_only(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        if not is_front_proxy(cert, self.allowed_names):
            REQUESTS.labels("rejected").inc()
            return status(401, "Unauthorized", "only the API server's front proxy may call")
        return await handler(request)

    async def discovery(self, _: web.Request) -> web.Response:
        return web.Response(body=em.discovery(self.history.metrics()),
                            content_type="application/json")  # fmt: skip

    async def metric(self, request: web.Request) -> web.Response:
        namespace, metric = request.match_info["namespace"], request.match_info["metric"]
        selector = request.query.get("labelSelector", "")
        try:
            query = em.query_for(namespace, metric, selector)
            labels = em.parse_selector(selector)
        except em.SelectorError as e:
            REQUESTS.labels("invalid").inc()
            return status(400, "BadRequest", str(e))
        window = self.history.answer(query, time.time(), self.default_delay)
        REQUESTS.labels("served" if window else "empty").inc()
        body = em.value_list(query, labels, [window] if window else [])
        return web.Response(body=body, content_type="application/json")

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.front_proxy_only])
        app.router.add_get(ROOT, self.discovery)
        app.router.add_get(f"{ROOT}/namespaces/{{namespace}}/{{metric}}", self.metric)
        return app


class Service:
    def __init__(self, settings: MetricsAdapterSettings) -> None:
        self.settings = settings
        self.load: Topic[LoadWindow] = dataclasses.replace(LOAD, name=settings.load_topic)
        self.history = em.WindowHistory(settings.keep_seconds + settings.delay_seconds)
        self.adapter = Adapter(self.history, settings.delay_seconds)
        self.consumer: bus.Consumer | None = None
        self.health: HealthServer | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    def ready(self) -> bool:
        return self._runner is not None and self.consumer is not None and self.consumer.ready

    async def _trust(self) -> tuple[str, list[str]]:
        s = self.settings.serve
        if s.requestheader_client_ca_file:
            ca = await asyncio.to_thread(Path(s.requestheader_client_ca_file).read_text)
            return ca, list(s.requestheader_allowed_names)
        async with await connect(self.settings.kubeconfig) as api:
            return await front_proxy_trust(Kube(api))

    async def start(self) -> None:
        s = self.settings
        self.health = HealthServer(s.http.host, s.http.port, self.ready)
        health_port = await self.health.start()
        ca, names = await self._trust()
        if not ca:
            raise RuntimeError("no front-proxy CA: the API server publishes none (no aggregation)")
        self.adapter.allowed_names = frozenset(names)
        ctx = server_context(s.serve.tls_cert_file, s.serve.tls_key_file, ca)
        self._runner = web.AppRunner(self.adapter.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, s.serve.host, s.serve.port, ssl_context=ctx)
        await site.start()
        self.port = int(self._runner.addresses[0][1]) if self._runner.addresses else s.serve.port
        self.consumer = bus.Consumer(
            s.kafka.bootstrap,
            [self.load],
            group_id=None,
            auto_offset_reset="latest",  # only fresh windows matter; history is in memory
            client_id=f"{s.kafka.client_id}-metrics-adapter",
            security=s.kafka.security,
        )
        await self.consumer.start()
        log.info("metrics adapter started: %s -> https :%d (%s), delay %.0f s, http :%d",
                 s.load_topic, self.port, em.GROUP_VERSION, s.delay_seconds,
                 health_port)  # fmt: skip

    async def _on_window(self, msg: bus.Message[Any]) -> None:
        if isinstance(msg.value, LoadWindow):
            now = time.time()
            for window in views(msg.value):  # one message per series carries several windows
                self.history.add(window, now)

    async def run(self) -> None:
        assert self.consumer is not None
        await self.consumer.run(self._on_window)

    def request_stop(self) -> None:
        if self.consumer is not None:
            self.consumer.request_stop()

    async def stop(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self.health is not None:
            await self.health.stop()
        log.info("metrics adapter stopped")


def start(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Run the service with the settings `args` name (parsed by governor_metrics_adapter.cli)."""
    settings = service_settings(parser, args, MetricsAdapterSettings, PREFIX)
    configure_logging("metrics-adapter", settings.log_level)
    asyncio.run(lifecycle.serve(Service(settings), log))
