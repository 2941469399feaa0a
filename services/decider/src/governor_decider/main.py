"""governor-decider: load windows, policies and workload states in; decisions out.

I/O only: what to decide is `governor.decider.DeciderCore` (pure). This shell
- reads its own checkpoints (governor.decider-state) first, so seq and history survive restarts;
- reads policies, workloads and the cluster (nodes with devices) as global tables (every
  partition, from the beginning);
- consumes governor.load in the consumer group `governor-decider` and decides once per fetch on
  each workload whose windows it held;
  for a pool with nodes in the cluster table, stage 2 (the allocation) then runs once per pool
  touched by the batch;
- ticks every `tick_seconds`, so staleness, fallback, cooldowns and panic exit fire without input
  (a workload its load evaluated within the last tick is skipped);
  on a tick every workload of a pool with inventory is evaluated, then each such pool's stage 2,
  so a node, GPU or NIC failure on the cluster table changes the next cycle's decisions;
- writes each checkpoint and waits for its acknowledgement before publishing the decision it
  allows (a cycle's checkpoints in flight together, then its recommendations and decisions);
  publishes capacity shortfalls (governor.shortfalls, keyed by pool) when they change.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import math
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import msgspec
from prometheus_client import Counter, Gauge, Histogram

from governor import events
from governor.bus import Consumer, Message, Producer, consumer_lag, read_table
from governor.decider import DeciderCore, Outputs
from governor.entry import service_settings
from governor.policy import devices as dev
from governor.settings import KafkaSettings
from governor.telemetry import HealthServer, configure_logging
from governor.topics import ensure_topics
from governor.windows import views
from governor_decider.cli import PREFIX
from governor_decider.journal import Journal

log = logging.getLogger("governor.decider")

DECISIONS = Counter(
    "governor_decider_decisions_total",
    "Scale decisions published, by the rule that bound them.",
    ["rule"],
)
EVALUATIONS = Counter(
    "governor_decider_evaluations_total", "Policy evaluations, by trigger.", ["trigger"]
)
LATENCY = Histogram(
    "governor_decider_sample_to_decision_seconds",
    "Newest input sample's event time to the publication of a decision made on that input "
    "(decisions the tick made due by time are not observed).",
    buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0),
)
REPLICAS = Gauge(
    "governor_decider_replicas",
    "Replicas per workload: current (observed), desired (recommended), min and max.",
    ["workload", "kind"],
)
PANIC = Gauge("governor_decider_panic_mode", "1 while a workload is in panic mode.", ["workload"])
SHORTFALLS = Counter(
    "governor_decider_shortfalls_total",
    "Shortfall records published (resolved ones included), by pool.",
    ["pool"],
)
POOL_SECONDS = Histogram(
    "governor_decider_pool_allocation_seconds",
    "Wall time of one pool's stage 2 (allocation and damping).",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)

# Per-workload and per-pool views for dashboards and alerts (docs/metrics.md lists the bounds).
WORKLOAD_DECISIONS = Counter(
    "governor_decider_workload_decisions_total",
    "Scale decisions published per workload, by direction (up, down, same: a resend) and the "
    "rule that bound them.",
    ["workload", "direction", "rule"],
)
METRIC_VALUE = Gauge(
    "governor_decider_metric_value",
    "A policy metric's stable-window value as the last evaluation saw it (AverageValue: the "
    "total over replicas; Utilization: percent of requests).",
    ["workload", "metric"],
)
METRIC_TARGET = Gauge(
    "governor_decider_metric_target",
    "A policy metric's target, by target type (Value, AverageValue, Utilization).",
    ["workload", "metric", "target_type"],
)
POOL_CAPACITY = Gauge(
    "governor_decider_pool_capacity",
    "What a pool's allocation could hand out, by resource (its unit: cores, bytes, devices): "
    "allocatable minus unmanaged requests; GPUs and RDMA VFs from healthy devices.",
    ["pool", "resource"],
)
POOL_ALLOCATED = Gauge(
    "governor_decider_pool_allocated",
    "What the granted replicas of a pool's allocation request, by resource.",
    ["pool", "resource"],
)
POOL_SHORTFALL = Gauge(
    "governor_decider_pool_shortfall",
    "What the replicas wanted but not granted would need, by the resource that ran out.",
    ["pool", "resource"],
)
SHORTFALL_REPLICAS = Gauge(
    "governor_decider_shortfall_replicas",
    "Replicas a workload wanted that its pool's allocation could not grant.",
    ["workload", "pool"],
)
ELASTIC_RESTARTS = Gauge(
    "governor_decider_elastic_restarts",
    "Restarts observed on an elastic training job (WorkloadState.restarts).",
    ["workload"],
)


def _replica_use(rec: events.Recommendation) -> dict[str, float]:
    """One replica's request per allocation dimension (whole GPUs, RDMA VFs included)."""
    use = {r: a for r, a in rec.requests.items() if a > 0 and r not in dev.DEVICE_RESOURCES}
    req = dev.device_request(rec.requests, rec.joint_allocate)
    if req.gpus or req.gpu_share:
        use[dev.GPU] = req.gpus + req.gpu_share / dev.WHOLE
    if req.nics:
        use[dev.RDMA] = float(req.nics)
    return use


class DeciderSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    kafka: KafkaSettings = msgspec.field(default_factory=KafkaSettings)
    group_id: str = "governor-decider"
    tick_seconds: float = 1.0
    step_seconds: float = 15.0
    pending_grace_seconds: float = 60.0
    http_host: str = "127.0.0.1"
    http_port: int = 8083
    log_level: str = "INFO"
    create_topics: bool = True
    journal: str | None = None  # path: a JSON-lines record of every input, for replay
    # The one source of truth for policies: `governor policies apply` ("file") or the
    # ScalingPolicy objects published by the cluster-side collector ("cluster").
    policy_source: Literal["file", "cluster"] = "file"
    # The names of the load, recommendations and decisions topics (same types and keys): isolated
    # pipelines on a shared broker (test and benchmark runs, a canary decider beside the real one).
    load_topic: str = events.LOAD.name
    recommendations_topic: str = events.RECOMMENDATIONS.name
    decisions_topic: str = events.DECISIONS.name
    # Stage 2's hysteresis margin (see governor.decider.DeciderCore.allocation_margin).
    allocation_margin: float = 0.0


class Decider:
    def __init__(self, settings: DeciderSettings) -> None:
        self.s = settings
        self.core = DeciderCore(
            step_seconds=settings.step_seconds,
            pending_grace=settings.pending_grace_seconds,
            allocation_margin=settings.allocation_margin,
        )
        sec = settings.kafka.security
        self.producer = Producer(
            settings.kafka.bootstrap, client_id="governor-decider", security=sec
        )
        self.load_topic = dataclasses.replace(events.LOAD, name=settings.load_topic)
        self.recommendations_topic = dataclasses.replace(
            events.RECOMMENDATIONS, name=settings.recommendations_topic
        )
        self.decisions_topic = dataclasses.replace(events.DECISIONS, name=settings.decisions_topic)
        self.tables = Consumer(
            settings.kafka.bootstrap,
            [events.POLICIES, events.WORKLOADS, events.CLUSTER, events.QUOTAS, events.QUEUES],
            group_id=None,
            client_id="governor-decider-tables",
            dlq_producer=self.producer,
            security=sec,
        )
        self.load = Consumer(
            settings.kafka.bootstrap,
            [self.load_topic],
            group_id=settings.group_id,
            client_id="governor-decider",
            # A new group starts at the newest windows; a restarted one resumes from its commits.
            auto_offset_reset="latest",
            dlq_producer=self.producer,
            security=sec,
        )
        self.journal = Journal(Path(settings.journal)) if settings.journal else None
        self.tables_loaded = False
        # When each workload was last evaluated on its load (the ticker skips those just done).
        self._evaluated: dict[str, float] = {}
        # Labelled children of the per-workload gauges (labels() per evaluation was a tenth of
        # the decider's time at 1,000 workloads), by (metric name, labels); the workload first.
        # (metric, *labels) -> child: every per-workload series goes through _child, so that
        # _forget knows the label sets to remove without reading the metric's internals.
        self._children: dict[tuple[Any, ...], Any] = {}
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()

    @property
    def ready(self) -> bool:
        return self.tables_loaded and self.producer.ready and self.load.ready

    async def restore(self) -> None:
        sec = self.s.kafka.security
        checkpoints = await read_table(self.s.kafka.bootstrap, events.DECIDER_STATE, security=sec)
        for cp in checkpoints.values():
            self.core.on_checkpoint(cp)
            if self.journal:
                self.journal.checkpoint(cp)
        policies = await read_table(self.s.kafka.bootstrap, events.POLICIES, security=sec)
        for key, rec in policies.items():
            self._policy(key, rec)
        for state in (
            await read_table(self.s.kafka.bootstrap, events.WORKLOADS, security=sec)
        ).values():
            self._workload(state)
        for node in (
            await read_table(self.s.kafka.bootstrap, events.CLUSTER, security=sec)
        ).values():
            self._node(node)
        for key, quota in (
            await read_table(self.s.kafka.bootstrap, events.QUOTAS, security=sec)
        ).items():
            self._quota(key, quota)
        for key, queue in (
            await read_table(self.s.kafka.bootstrap, events.QUEUES, security=sec)
        ).items():
            self._queue(key, queue)
        self.tables_loaded = True
        log.info(
            "restored",
            extra={"checkpoints": len(checkpoints), "policies": len(self.core.policies)},
        )

    def _policy(self, key: str, rec: events.PolicyRecord | None) -> None:
        if rec is not None and rec.origin != self.s.policy_source:
            log.warning(
                "ignoring policy %s from %s: this decider's policy_source is %s",
                key,
                rec.origin,
                self.s.policy_source,
            )
            return
        policy = rec.policy if rec is not None else None
        gone = self.core.policy_keys.get(key)
        self.core.on_policy(key, policy)
        if gone is not None and gone not in self.core.policies:
            self._forget(gone)
        if self.journal:
            self.journal.policy(key, policy)

    def _forget(self, workload: str) -> None:
        """Drop a deleted policy's per-workload series (bounded label sets)."""
        self._evaluated.pop(workload, None)
        for key in [k for k in self._children if k[1] == workload]:
            metric, *labels = key
            metric.remove(*labels)
            del self._children[key]

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _pool_metrics(self, pool: str) -> None:
        """Capacity, allocation and shortfall of the pool's current allocation."""
        memory = self.core.pools.get(pool)
        alloc = memory.allocation if memory is not None else None
        if alloc is None:
            return
        recs = self.core.recommendations.get(pool, {})
        allocated = dict.fromkeys(alloc.capacity, 0.0)
        short = dict.fromkeys(alloc.capacity, 0.0)
        for workload, grant in alloc.grants.items():
            rec = recs.get(workload)
            if rec is not None:
                for r, a in _replica_use(rec).items():
                    allocated[r] = allocated.get(r, 0.0) + grant.replicas * a
            for r, a in grant.missing.items():
                short[r] = short.get(r, 0.0) + a
            self._child(SHORTFALL_REPLICAS, workload, pool).set(
                max(0, grant.wanted - grant.replicas)
            )
        for r, a in alloc.capacity.items():
            POOL_CAPACITY.labels(pool, r).set(a)
        for r, a in allocated.items():
            POOL_ALLOCATED.labels(pool, r).set(a)
        for r, a in short.items():
            POOL_SHORTFALL.labels(pool, r).set(a)

    def _workload(self, state: events.WorkloadState) -> None:
        self.core.on_workload(state)
        if self.journal:
            self.journal.workload(state)

    def _node(self, node: events.NodeState) -> None:
        self.core.on_node(node)
        if self.journal:
            self.journal.node(node)

    def _quota(self, key: str, quota: events.QuotaState | None) -> None:
        self.core.on_quota(key, quota)
        if self.journal:
            self.journal.quota(key, quota)

    def _queue(self, key: str, queue: events.QueueState | None) -> None:
        self.core.on_queue(key, queue)
        if self.journal:
            self.journal.queue(key, queue)

    def _node_deleted(self, name: str) -> None:
        self.core.on_node_deleted(name)
        if self.journal:
            self.journal.node_deleted(name)

    async def on_table(self, msg: Message[Any]) -> None:
        async with self._lock:
            if msg.topic == events.POLICIES.name and msg.key is not None:
                self._policy(msg.key, msg.value)
            elif msg.topic == events.WORKLOADS.name and msg.value is not None:
                self._workload(msg.value)
            elif msg.topic == events.CLUSTER.name:
                if msg.value is not None:
                    self._node(msg.value)
                elif msg.key is not None:
                    self._node_deleted(msg.key)
            elif msg.topic == events.QUOTAS.name and msg.key is not None:
                self._quota(msg.key, msg.value)
            elif msg.topic == events.QUEUES.name and msg.key is not None:
                self._queue(msg.key, msg.value)

    async def on_load(self, batch: list[Message[Any]]) -> None:
        touched: dict[str, None] = {}
        async with self._lock:
            for msg in batch:
                # One message per series carries several windows (LoadWindow.more).
                for window in views(msg.value):
                    self.core.on_window(window)
                    if self.journal:
                        self.journal.window(window)
                touched[msg.value.workload] = None
            now = time.time()
            # Each workload once per fetch, however many of its windows the fetch held.
            await self._decide_all(touched, now, "load")
            for workload in touched:
                self._evaluated[workload] = now
            pools: dict[str, None] = {}
            for workload in touched:
                pool = self.core.pool_of(workload)
                if pool is not None and self.core.has_inventory(pool):
                    pools[pool] = None
            for pool in pools:
                await self._decide_pool(pool, now, "load")

    async def ticker(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(self.s.tick_seconds)
            if not self.tables_loaded:
                continue
            async with self._lock:
                now = time.time()
                # Only workloads whose load this instance consumes: their partitions are ours.
                # Stage 2 needs a pool's whole set, so pools with inventory evaluate all theirs.
                pools = self.core.inventory_pools()
                members = {w for w, p in self.core.policies.items() if p.spec.pool in set(pools)}
                # A workload its load evaluated within the last tick is not evaluated again (at
                # 1 sample/s that is nearly every one): time still moves for each workload at
                # least every two ticks, for staleness, fallback, cooldowns and panic exit.
                recent = now - self.s.tick_seconds
                due = [
                    w
                    for w in sorted(set(self.core.windows) | members)
                    if self._evaluated.get(w, -math.inf) < recent
                ]
                await self._decide_all(due, now, "tick")
                for pool in pools:
                    await self._decide_pool(pool, now, "tick")
            consumer_lag(self.load)
            consumer_lag(self.tables)

    async def _decide(self, workload: str, now: float, trigger: str) -> None:
        await self._decide_all((workload,), now, trigger)

    async def _decide_all(self, workloads: Iterable[str], now: float, trigger: str) -> None:
        """Stage 1 for each workload, then everything it asks to publish, in flight together."""
        outs: list[tuple[str, Outputs]] = []
        for workload in workloads:
            if self.journal:
                self.journal.decide(workload, now)
            outs.append((workload, self.core.decide(workload, now)))
        if outs:
            EVALUATIONS.labels(trigger).inc(len(outs))
        await self._publish_all(outs, trigger)

    async def _decide_pool(self, pool: str, now: float, trigger: str) -> None:
        if self.journal:
            self.journal.decide_pool(pool, now)
        started = time.perf_counter()
        out = self.core.decide_pool(pool, now)
        POOL_SECONDS.observe(time.perf_counter() - started)
        self._pool_metrics(pool)
        # Every checkpoint is acknowledged before any decision of this cycle goes out.
        await self.producer.wait(
            [await self.producer.publish(events.DECIDER_STATE, cp) for cp in out.checkpoints]
        )
        await self._publish_all([(d.workload, Outputs(decision=d)) for d in out.decisions], trigger)
        for sf in out.shortfalls:
            await self.producer.publish(events.SHORTFALLS, sf)
            SHORTFALLS.labels(pool).inc()
            log.info(
                "shortfall %s: %d/%d",
                sf.workload,
                sf.granted,
                sf.wanted,
                extra={"workload": sf.workload, "pool": pool, "reason": sf.reason},
            )
        if out.note:
            log.debug(out.note, extra={"pool": pool})

    async def _publish_all(self, outs: list[tuple[str, Outputs]], trigger: str) -> None:
        """Publish a cycle's outputs: all checkpoints at once, and only once every one of them
        is acknowledged (a restart can never reuse a seq) the recommendations and decisions;
        returns when those are acknowledged too. One round trip or two per cycle, not one per
        workload."""
        producer = self.producer
        await producer.wait(
            [
                await producer.publish(events.DECIDER_STATE, out.checkpoint)
                for _, out in outs
                if out.checkpoint is not None
            ]
        )
        acks: list[asyncio.Future[Any] | None] = []
        for workload, out in outs:
            await self._publish(workload, out, acks)
        await producer.wait(acks)
        if trigger == "tick":
            # Made due by time (a stabilization window or rate limit running out) on input
            # already evaluated: its age is the sample interval, not the pipeline's latency.
            return
        published = time.time()
        for _, out in outs:
            if out.decision is not None:
                LATENCY.observe(max(0.0, published - out.decision.newest_input))

    async def _publish(
        self, workload: str, out: Outputs, acks: list[asyncio.Future[Any] | None]
    ) -> None:
        """Queue one evaluation's recommendation and decision (its checkpoint is acknowledged)."""
        rec = out.recommendation
        if rec is not None:
            acks.append(await self.producer.publish(self.recommendations_topic, rec))
            child = self._child
            for kind, value in (
                ("current", rec.current),
                ("desired", rec.desired),
                ("min", rec.min_replicas),
                ("max", rec.max_replicas),
            ):
                child(REPLICAS, workload, kind).set(value)
            child(PANIC, workload).set(any(r.rule == "panic" for r in rec.reasons))
            for inp in rec.inputs:
                child(METRIC_TARGET, workload, inp.metric, inp.target_type).set(inp.target)
                if inp.value is not None:
                    child(METRIC_VALUE, workload, inp.metric).set(inp.value)
            if rec.elastic:
                observed = self.core.workloads.get(workload)
                if observed is not None:
                    self._child(ELASTIC_RESTARTS, workload).set(observed.restarts)
        d = out.decision
        if d is not None:
            acks.append(await self.producer.publish(self.decisions_topic, d))
            rule = next((r.rule for r in reversed(d.reasons) if r.rule != "metric"), "metric")
            DECISIONS.labels(rule).inc()
            direction = (
                "up"
                if d.to_replicas > d.from_replicas
                else "down"
                if d.to_replicas < d.from_replicas
                else "same"
            )
            self._child(WORKLOAD_DECISIONS, workload, direction, rule).inc()
            log.info(
                "decision %d -> %d",
                d.from_replicas,
                d.to_replicas,
                extra={
                    "workload": workload,
                    "decision_id": d.decision_id,
                    "seq": d.seq,
                    "reasons": "; ".join(f"{r.rule}: {r.detail}" for r in d.reasons),
                },
            )
        elif out.note and out.note != "no change":
            log.debug(out.note, extra={"workload": workload})

    async def run(self) -> None:
        # On a secure broker the topics are admin's (governor.kafka_provision), not the decider's.
        if self.s.create_topics and self.s.kafka.security.protocol == "PLAINTEXT":
            own = (self.load_topic, self.recommendations_topic, self.decisions_topic)
            topics = {t.name: t for t in (*events.TOPICS, *own)}
            await ensure_topics(self.s.kafka.bootstrap, topics.values())
        await self.producer.start()
        await self.restore()
        await self.tables.start()
        await self.load.start()
        health = HealthServer(self.s.http_host, self.s.http_port, lambda: self.ready)
        await health.start()
        tasks = [
            asyncio.create_task(self.tables.run(self.on_table)),
            asyncio.create_task(self.load.run_fetches(self.on_load)),
            asyncio.create_task(self.ticker()),
        ]
        log.info("decider running", extra={"http_port": health.port})
        await self._stop.wait()
        await self.load.stop()
        await self.tables.stop()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.producer.stop()
        await health.stop()
        if self.journal:
            self.journal.close()

    def stop(self) -> None:
        self._stop.set()


def start(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Run the service with the settings `args` name (parsed by governor_decider.cli)."""
    settings = service_settings(parser, args, DeciderSettings, PREFIX)
    configure_logging("decider", settings.log_level)
    decider = Decider(settings)

    async def amain() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, decider.stop)
        await decider.run()

    asyncio.run(amain())
