"""Runs the sources the ScalingPolicies ask for, and keeps them in step with the policies.

The wanted set is a pure function of the policy table: one source per (workload, metric) of
every policy, configured by that metric's `source` spec. On every change of the table the
scheduler diffs the wanted set against what runs (`plan`, pure) and starts, stops or restarts
(a changed spec or target) only what differs, so an added, changed or deleted policy takes
effect without a restart and untouched sources keep their state (e.g. the previous offsets of
`excludePersistentLag`).

Several collectors split the pull sources (`owned`, pure): a pull source runs only where the
collectors' consumer group assigned its partition (`reassign`); push sources run everywhere,
since the push endpoints are shared behind one Service.

Two policies naming the same (workload, metric) conflict: the policy whose key (namespace/name)
sorts first wins, the other's metric is not started and counted
(`governor_collector_policy_errors_total{reason="conflict"}`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from governor.cores.collector import SourceHealth, next_poll
from governor.spec import MetricSource, ScalingPolicy
from governor_collector import metrics
from governor_collector.sources import (
    SOURCES,
    Publisher,
    PullSource,
    Source,
    SourceContext,
    SourceError,
    SourceTarget,
    create_source,
    source_name,
)

log = logging.getLogger("governor_collector.scheduler")

Key = tuple[str, str]  # (workload, metric)


@dataclass(frozen=True)
class WantedSource:
    target: SourceTarget
    config: MetricSource

    @property
    def name(self) -> str:
        return source_name(self.config)


@dataclass(frozen=True)
class Conflict:
    key: Key
    kept: str  # policy key
    dropped: str


@dataclass(frozen=True)
class Plan:
    start: list[Key] = field(default_factory=list)
    stop: list[Key] = field(default_factory=list)
    restart: list[Key] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.start or self.stop or self.restart)


def wanted_sources(
    policies: Mapping[str, ScalingPolicy],
) -> tuple[dict[Key, WantedSource], list[Conflict]]:
    """Every (workload, metric) the policies ask to collect, with its source spec.

    A Shadow policy is evaluated on its target's live inputs, so a metric its Active policy
    already collects is shared, not a conflict (Active policies come first); one only the
    Shadow names is collected for it."""
    wanted: dict[Key, WantedSource] = {}
    conflicts: list[Conflict] = []
    for pkey in sorted(policies, key=lambda k: (policies[k].spec.mode == "Shadow", k)):
        policy = policies[pkey]
        for m in policy.spec.metrics:
            key = (policy.workload, m.name)
            if key in wanted:
                if policy.spec.mode != "Shadow":
                    conflicts.append(Conflict(key, wanted[key].target.policy, pkey))
                continue
            target = SourceTarget(
                workload=policy.workload,
                metric=m.name,
                namespace=policy.metadata.namespace,
                target_ref=policy.spec.target_ref,
                policy=pkey,
            )
            wanted[key] = WantedSource(target, m.source)
    return wanted, conflicts


Owns = Callable[[Key], bool]


def owns_all(key: Key) -> bool:
    """One collector alone (or before its group's first assignment): every pull source."""
    return True


def owned(wanted: Mapping[Key, WantedSource], owns: Owns) -> dict[Key, WantedSource]:
    """The wanted sources this collector runs: its share of the pull sources, every push one
    (a source of an unknown name stays, for `_start` to report)."""
    return {
        k: w
        for k, w in wanted.items()
        if w.name not in SOURCES or SOURCES[w.name].shape != "pull" or owns(k)
    }


def plan(running: Mapping[Key, WantedSource], wanted: Mapping[Key, WantedSource]) -> Plan:
    """What to do to go from `running` to `wanted` (restart = same key, different spec/target)."""
    start = sorted(k for k in wanted if k not in running)
    stop = sorted(k for k in running if k not in wanted)
    restart = sorted(k for k in wanted if k in running and running[k] != wanted[k])
    return Plan(start, stop, restart)


@dataclass
class _Running:
    wanted: WantedSource
    source: Source[Any]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


def _fields(t: SourceTarget, source: str) -> dict[str, str]:
    return {"workload": t.workload, "metric": t.metric, "source": source, "policy": t.policy}


class Scheduler:
    """Starts and stops source instances; runs one loop per pull source."""

    def __init__(
        self,
        ctx: SourceContext,
        publisher: Publisher,
        *,
        clock: Callable[[], float] = time.time,
        stop_grace_s: float = 5.0,
    ) -> None:
        self.ctx = ctx
        self.publisher = publisher
        self.clock = clock
        self.stop_grace_s = stop_grace_s
        self._running: dict[Key, _Running] = {}
        self._lock = asyncio.Lock()
        self._owns: Owns = owns_all
        self._policies: Mapping[str, ScalingPolicy] = {}

    @property
    def running(self) -> dict[Key, WantedSource]:
        return {k: r.wanted for k, r in self._running.items()}

    async def apply(self, policies: Mapping[str, ScalingPolicy]) -> Plan:
        """Bring the running sources in line with `policies` (the whole table)."""
        async with self._lock:
            self._policies = policies
            wanted, conflicts = wanted_sources(policies)
            for c in conflicts:
                metrics.POLICY_ERRORS.labels("conflict").inc()
                log.warning(
                    "policy %s also collects %s of %s, already collected for policy %s: ignored",
                    c.dropped,
                    c.key[1],
                    c.key[0],
                    c.kept,
                    extra={"workload": c.key[0], "metric": c.key[1], "policy": c.dropped},
                )
            p = plan(self.running, owned(wanted, self._owns))
            for key in p.stop + p.restart:
                await self._stop(key)
            for key in p.restart + p.start:
                await self._start(wanted[key])
            if not p.empty:
                log.info(
                    "sources: %d started, %d restarted, %d stopped, %d running",
                    len(p.start),
                    len(p.restart),
                    len(p.stop),
                    len(self._running),
                )
            return p

    async def reassign(self, owns: Owns) -> Plan:
        """The collectors' group moved the pull sources: stop what is no longer ours, start
        what became ours (untouched sources keep running, with their state)."""
        self._owns = owns
        return await self.apply(self._policies)

    async def close(self) -> None:
        async with self._lock:
            await asyncio.gather(*(self._stop(k) for k in list(self._running)))

    async def start(self, w: WantedSource) -> None:
        """Start one source outside a policy table (`apply` starts the table's)."""
        async with self._lock:
            await self._start(w)

    async def _start(self, w: WantedSource) -> None:
        t = w.target
        key = (t.workload, t.metric)
        if w.name not in SOURCES:
            metrics.POLICY_ERRORS.labels("unknown_source").inc()
            log.error("no source named %s", w.name, extra=_fields(t, w.name))
            return
        source = create_source(t, w.config, self.ctx)
        r = _Running(w, source)
        self._running[key] = r
        metrics.SOURCES_RUNNING.labels(source.name).inc()
        log.info("source started", extra=_fields(t, source.name))
        if isinstance(source, PullSource):
            r.task = asyncio.create_task(self._loop(r), name=f"source {source.name} {key}")
        else:
            try:
                await source.start()
                metrics.SOURCE_UP.labels(source.name, t.workload, t.metric).set(1)
            except Exception as e:
                metrics.SOURCE_UP.labels(source.name, t.workload, t.metric).set(0)
                metrics.SOURCE_ERRORS.labels(source.name, "internal").inc()
                log.exception("source failed to start: %s", e, extra=_fields(t, source.name))

    async def _stop(self, key: Key) -> None:
        r = self._running.pop(key, None)
        if r is None:
            return
        r.stop.set()
        if r.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(r.task), self.stop_grace_s)
            except TimeoutError:
                r.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await r.task
        try:
            await r.source.close()
        except Exception:
            log.exception("closing a source failed", extra=_fields(r.wanted.target, r.source.name))
        t = r.wanted.target
        metrics.remove_up(r.source.name, t.workload, t.metric)
        metrics.SOURCES_RUNNING.labels(r.source.name).dec()
        log.info("source stopped", extra=_fields(t, r.source.name))

    async def _loop(self, r: _Running) -> None:
        src = r.source
        assert isinstance(src, PullSource)
        t = src.target
        up = metrics.SOURCE_UP.labels(src.name, t.workload, t.metric)
        hist = metrics.POLL_SECONDS.labels(src.name)
        fields = _fields(t, src.name)
        health = SourceHealth()
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while not r.stop.is_set():
            started = loop.time()
            reason: str | None = None
            try:
                samples = await src.collect(self.clock())
            except SourceError as e:
                reason, detail = e.reason, e.detail
            except Exception as e:  # a bug in a source must not kill the scheduler
                reason, detail = "internal", f"{type(e).__name__}: {e}"
                log.exception("source raised", extra=fields)
            if reason is not None:
                up.set(0)
                metrics.SOURCE_ERRORS.labels(src.name, reason).inc()
                if health.failed(reason):
                    log.warning("source down (%s): %s", reason, detail, extra=fields)
            else:
                try:
                    await self.publisher.publish(samples)
                except Exception as e:
                    metrics.SOURCE_ERRORS.labels(src.name, "publish").inc()
                    log.warning("publishing %d samples failed: %s", len(samples), e, extra=fields)
                else:
                    up.set(1)
                    metrics.SAMPLES.labels(src.name).inc(len(samples))
                    if health.published():
                        log.info("source up", extra=fields)
            hist.observe(loop.time() - started)
            now = loop.time()
            next_at = next_poll(next_at, src.interval, now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(r.stop.wait(), next_at - now)
