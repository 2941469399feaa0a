"""What every service exposes: JSON logs, and an HTTP server with /metrics, /healthz, /readyz."""

from __future__ import annotations

import logging
import ssl
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry

from governor.bulk_metrics import exposition

# Attributes every LogRecord has; anything else passed via `extra=` becomes a JSON field.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; `extra={"workload": ..., "decision_id": ...}` adds fields."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service
        self._encoder = msgspec.json.Encoder()

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                plain = isinstance(value, str | int | float | bool | None)
                doc[key] = value if plain else str(value)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return self._encoder.encode(doc).decode()


class SlowTickAsInfo(logging.Filter):
    """Logs mode's "Timer … is overlapping" at INFO, not WARNING (on the `mode.timers` logger of
    a faust service). A 0.25 s timer whose body once ran longer (a checkpoint waiting for its
    acks on a busy machine) only ticks late; nothing is lost or wrong, and the lag and latency
    metrics show a service that falls behind. Every other record passes as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and str(record.msg).startswith("Timer %s is overlap"):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def configure_logging(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiokafka logs every reconnect attempt at ERROR; our own backoff reports outages once.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


class HealthServer:
    """`/metrics`, `/healthz` (the process runs) and `/readyz` (the `ready` callable says so)."""

    def __init__(
        self,
        host: str,
        port: int,
        ready: Callable[[], bool],
        registry: CollectorRegistry = REGISTRY,
        extra_routes: list[web.RouteDef] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host, self.port = host, port
        self._ssl = ssl_context
        self._ready = ready
        self._registry = registry
        self._started = time.time()
        self.app = web.Application()
        self.app.add_routes(
            [
                web.get("/metrics", self._metrics),
                web.get("/healthz", self._healthz),
                web.get("/readyz", self._readyz),
                *(extra_routes or []),
            ]
        )
        self._runner: web.AppRunner | None = None

    async def _metrics(self, _: web.Request) -> web.Response:
        body = exposition(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "uptime_seconds": time.time() - self._started})

    async def _readyz(self, _: web.Request) -> web.Response:
        ok = self._ready()
        return web.json_response({"ready": ok}, status=200 if ok else 503)

    async def start(self) -> int:
        """Start serving; returns the bound port (useful with port 0)."""
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self._ssl)
        await site.start()
        addresses = self._runner.addresses
        if addresses:
            self.port = int(addresses[0][1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class Tally:
    """Counter increments gathered in a plain dict and applied to the Prometheus children at
    `flush`: a hot loop that counts per workload (the aggregator's samples and windows) pays a
    dict update, not a locked `inc`, each time; /metrics trails by at most one flush."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: dict[Any, float] = {}

    def add(self, child: Any, amount: float = 1) -> None:
        pending = self._pending
        pending[child] = pending.get(child, 0) + amount

    def flush(self) -> None:
        pending, self._pending = self._pending, {}
        for child, amount in pending.items():
            child.inc(amount)
