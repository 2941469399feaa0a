"""The one small interface every metric source implements, and the registry of sources by name.

A source is created per (workload, metric) of a ScalingPolicy, from that metric's `source` spec
(`governor.spec.MetricSource`, a tagged union: the tag `type` is the registry name). Two shapes:

* `PullSource`: the scheduler calls `collect(now)` every `interval` seconds and publishes what it
  returns; `collect` raises `SourceError(reason, detail)` when it cannot observe the metric. A
  failing source never invents a value: no sample is published, `up` goes to 0 and the error is
  counted by reason, so the decider sees the metric go stale and holds (DESIGN: an outage freezes,
  it does not collapse).
* `PushedSource`: samples arrive from outside (HTTP `POST /v1/samples`, or straight on the
  metrics topic); the source only declares that the (workload, metric) is expected.

Sources do I/O only. Conversions (a PromQL result into samples, PodMetrics into usage, KEDA's lag
arithmetic) are pure functions beside them or in `governor.policy`.

Adding a source: a module in this package with a `@register`ed subclass whose `name` equals the
tag of its spec type in `governor.spec`, imported by `governor_collector.sources`.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

import aiohttp
import msgspec

from governor.events import MetricSample
from governor.spec import MetricSource, TargetRef

C = TypeVar("C", bound=msgspec.Struct)

HTTP_SESSION = "http"  # SourceContext.shared names of the clients every source shares
KUBE_CLIENT = "kube"


class Publisher(Protocol):
    """Where samples go (the metrics topic). `publish` returns once Kafka acknowledged every
    sample and raises otherwise; the collector's implementation is `kafka.BusPublisher`."""

    async def publish(self, samples: Sequence[MetricSample]) -> None: ...


class SourceError(Exception):
    """A source could not observe its metric. `reason` is a short token (a metric label:
    bounded set), `detail` says what happened and, where it can, what to do."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def finite_number(parse: Callable[[Any], float], raw: Any, reason: str, what: str) -> float:
    """`parse(raw)`; `SourceError(reason, "<what>, not a number")` if it cannot be parsed, or
    "..., not a finite number" if it parses to inf or nan."""
    try:
        value = parse(raw)
    except (TypeError, ValueError):
        raise SourceError(reason, f"{what}, not a number") from None
    if not math.isfinite(value):
        raise SourceError(reason, f"{what}, not a finite number")
    return value


@dataclass(frozen=True)
class SourceTarget:
    """What one source instance observes: a metric of a workload, named by its policy."""

    workload: str  # namespace/kind/name
    metric: str
    namespace: str
    target_ref: TargetRef
    policy: str = ""  # namespace/name of the ScalingPolicy


async def open_kube(kubeconfig: str | None) -> Any:
    """A kubernetes_asyncio ApiClient from `kubeconfig`, else the in-cluster configuration."""
    from kubernetes_asyncio import client, config

    if kubeconfig:
        cfg = client.Configuration()
        await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration=cfg)


R = TypeVar("R")


@dataclass
class SourceContext:
    """Clients shared by all sources of a process (one HTTP session, one Kafka offsets client per
    bootstrap, one Kubernetes client), created on first use and closed with the context."""

    resources: dict[str, Any] = field(default_factory=dict)
    # Process settings sources may need (e.g. "kubeconfig"), set by the shell.
    options: dict[str, Any] = field(default_factory=dict)
    _closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    async def shared(
        self,
        name: str,
        create: Callable[[], Awaitable[R]],
        close: Callable[[R], Awaitable[None]] | None = None,
    ) -> R:
        """The shared client `name`, created by `create` on first use (once, even when many
        sources ask at the same time); `close` runs when the context closes."""
        if name in self.resources:
            return self.resources[name]  # type: ignore[no-any-return]
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self.resources:
                value = await create()
                self.resources[name] = value
                if close is not None:
                    self._closers.append(lambda: close(value))
        return self.resources[name]  # type: ignore[no-any-return]

    async def http(self) -> aiohttp.ClientSession:
        """The process's one HTTP session (Prometheus, the Metrics API, RabbitMQ, ...)."""

        async def create() -> aiohttp.ClientSession:
            return aiohttp.ClientSession(headers={"User-Agent": "governor-collector"})

        async def close(session: aiohttp.ClientSession) -> None:
            await session.close()

        return await self.shared(HTTP_SESSION, create, close)

    async def kube(self) -> Any:
        """The process's one Kubernetes API client (kubernetes_asyncio `ApiClient`), from the
        `kubeconfig` option, else the in-cluster configuration; `SourceError("kube")` when
        neither is there."""

        async def create() -> Any:
            try:
                return await open_kube(self.options.get("kubeconfig"))
            except Exception as e:
                raise SourceError("kube", f"no Kubernetes client configuration: {e}") from None

        async def close(api: Any) -> None:
            await api.close()

        return await self.shared(KUBE_CLIENT, create, close)

    async def close(self) -> None:
        for closer in reversed(self._closers):
            try:
                await closer()
            except Exception:  # closing is best effort; one failure must not leak the rest
                logging.getLogger(__name__).exception("closing a shared client failed")
        self._closers.clear()
        self.resources.clear()


class Source(abc.ABC, Generic[C]):
    """Base of every source: `name` is its registry name (= the spec's tag)."""

    name: ClassVar[str]
    shape: ClassVar[Literal["pull", "push"]]
    config_type: ClassVar[type[msgspec.Struct]]

    def __init__(self, target: SourceTarget, config: C, ctx: SourceContext) -> None:
        self.target = target
        self.config = config
        self.ctx = ctx

    async def start(self) -> None:
        """Acquire what the source needs (called once, before the first collect)."""

    async def close(self) -> None:
        """Release what `start` acquired (shared clients belong to the context)."""

    def sample(
        self,
        value: float,
        timestamp: float,
        *,
        metric: str | None = None,
        unit: str = "",
        labels: dict[str, str] | None = None,
    ) -> MetricSample:
        return MetricSample(
            workload=self.target.workload,
            metric=metric or self.target.metric,
            value=value,
            timestamp=timestamp,
            unit=unit,
            source=self.name,
            labels=labels or {},
        )


class PullSource(Source[C]):
    """Polled every `interval` seconds by the scheduler."""

    shape: ClassVar[Literal["pull", "push"]] = "pull"

    @property
    def interval(self) -> float:
        return float(getattr(self.config, "interval_seconds", 15.0))

    @abc.abstractmethod
    async def collect(self, now: float) -> list[MetricSample]:
        """Observe the metric now; raise SourceError when it cannot (never return a made-up
        value)."""

    async def http_get(
        self,
        url: str,
        *,
        where: str,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """GET `url` on the shared session: (status, body). A poll waits at most its interval
        (1 to 10 s); no answer is `timeout`, a refused or broken connection `unreachable`
        (`where` names the server in the message; the status is the caller's to judge)."""
        session = await self.ctx.http()
        timeout = aiohttp.ClientTimeout(total=max(1.0, min(self.interval, 10.0)))
        try:
            async with session.get(url, headers=headers, params=params, timeout=timeout) as r:
                return r.status, await r.read()
        except TimeoutError:
            raise SourceError("timeout", f"{where} did not answer") from None
        except (aiohttp.ClientError, OSError) as e:
            raise SourceError("unreachable", f"{where}: {type(e).__name__}: {e}") from None


class PushedSource(Source[C]):
    """Samples arrive from outside; the instance says the (workload, metric) is expected."""

    shape: ClassVar[Literal["pull", "push"]] = "push"


SOURCES: dict[str, type[Source[Any]]] = {}

S = TypeVar("S", bound=type[Source[Any]])


def register(cls: S) -> S:
    """Class decorator: make a source available under `cls.name`."""
    if cls.name in SOURCES and SOURCES[cls.name] is not cls:
        raise ValueError(f"source {cls.name!r} registered twice")
    SOURCES[cls.name] = cls
    return cls


def source_name(config: MetricSource | msgspec.Struct) -> str:
    """The registry name of a source spec: its msgspec tag (`type` in the YAML)."""
    tag = type(config).__struct_config__.tag
    if not isinstance(tag, str):
        raise TypeError(f"{type(config).__name__} is not a tagged source spec")
    return tag


def create_source(target: SourceTarget, config: msgspec.Struct, ctx: SourceContext) -> Source[Any]:
    name = source_name(config)
    try:
        cls = SOURCES[name]
    except KeyError:
        known = ", ".join(sorted(SOURCES))
        raise SourceError("unknown_source", f"no source named {name!r} (known: {known})") from None
    return cls(target, config, ctx)
