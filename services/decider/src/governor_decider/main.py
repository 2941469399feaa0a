"""governor-decider: load windows, policies and workload states in; decisions out.

I/O only: what to decide is `governor.cores.decider.DeciderCore` (pure), here as two cores, stage 1
and stage 2, as separate instances would hold them. This shell
- reads policies, workloads and the cluster (nodes with devices) as global tables (every
  partition, from the beginning), into both cores;
- consumes governor.load (stage 1) and governor.recommendations (stage 2) in ONE consumer group
  `governor-decider`: another process with the same group takes a share of both. Per fetch,
  stage 1 evaluates each workload whose windows it held and publishes its recommendation
  (keyed by pool), or decides it itself where its pool has no inventory (pass-through,
  `governor.cores.decider_handover`); stage 2 decides each recommended workload of a pool
  without inventory (one handed over), then runs the allocation once per touched pool with
  inventory;
- follows its partitions: a new assignment stays paused while it reads governor.decider-state
  (outside the rebalance: `restorer`) and hands the checkpoints to the cores (applied on first
  use); before the load offsets are committed (every `checkpoint_seconds`) and when partitions
  are revoked it writes stage 1's checkpoints;
- ticks every `tick_seconds` (the cores' `tick`, `governor.cores.decider_due`) over the
  workloads it owns, so staleness, fallback, cooldowns and panic exit fire without input (a
  workload its load evaluated within the last `decider_due.LOAD_SKIP_TICKS` ticks is skipped);
  every workload of a pool with inventory is evaluated, then each owned such pool's stage 2, so
  a node, GPU or NIC failure on the cluster table changes the next cycle's decisions;
- returns what a fetch or a tick decided to `run_core` as rounds of (topic, record) pairs
  (`governor.shell.RoutingSink`): a cycle's checkpoints acknowledged together before the
  recommendations and decisions they allow, then each pool's stage 2 the same way (capacity
  shortfalls, governor.shortfalls keyed by pool, with its decisions, when they change).
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
from typing import Any

from governor import cores, events, gc_tuning
from governor.bus import Consumer, Fetch, Message, Producer, consumer_lag, read_table
from governor.cores.decider import POOL_PREFIX, DeciderCore, Outputs
from governor.cores.decider_due import PartitionLag
from governor.cores.decider_memory import restoring_stages
from governor.entry import service_settings
from governor.ownership import Ownership
from governor.shell import Routed, RoutingSink, merged, run_core
from governor.telemetry import HealthServer, configure_logging
from governor.topics import ensure_topics
from governor.windows import views
from governor_decider.cli import PREFIX
from governor_decider.journal import Journal, stage2_path
from governor_decider.metrics import (
    DECISIONS,
    EVALUATIONS,
    LATENCY,
    POOL_SECONDS,
    SHADOW_REPLICAS,
    SHORTFALLS,
    WORKLOAD_DECISIONS,
    pool_metrics,
    recommendation_metrics,
)
from governor_decider.restorer import Restorer
from governor_decider.settings import DeciderSettings

log = logging.getLogger("governor.decider")

# What a step of the decider returns to `run_core`: rounds of (topic, record) pairs.
Step = cores.Outputs[Routed]


class Decider:
    def __init__(self, settings: DeciderSettings) -> None:
        self.s = settings
        # Stage 1 for the load partitions this instance owns, stage 2 for the recommendations'
        # (pools) it owns: two cores, as two instances would hold them.
        self.stage1, self.stage2 = (
            DeciderCore(
                step_seconds=settings.step_seconds,
                pending_grace=settings.pending_grace_seconds,
                allocation_margin=settings.allocation_margin,
                tick_seconds=settings.tick_seconds,
                role=role,
                pass_through=settings.pass_through,
                behind_records=settings.behind_records,
            )
            for role in ("stage1", "stage2")
        )
        self.cores = (self.stage1, self.stage2)
        sec = settings.kafka.security
        self.producer = Producer(
            settings.kafka.bootstrap, client_id="governor-decider", security=sec
        )
        # Checkpoints and records alike: each pair to its topic, in batches, retried until acked.
        self.sink = RoutingSink(self.producer)
        self.load_topic = dataclasses.replace(events.LOAD, name=settings.load_topic)
        self.recommendations_topic = dataclasses.replace(
            events.RECOMMENDATIONS, name=settings.recommendations_topic
        )
        self.decisions_topic = dataclasses.replace(events.DECISIONS, name=settings.decisions_topic)
        self.policies_topic = dataclasses.replace(events.POLICIES, name=settings.policies_topic)
        self.workloads_topic = dataclasses.replace(events.WORKLOADS, name=settings.workloads_topic)
        self.checkpoints_topic = dataclasses.replace(
            events.DECIDER_STATE, name=settings.checkpoints_topic
        )
        self.tables = Consumer(
            settings.kafka.bootstrap,
            (
                self.policies_topic,
                self.workloads_topic,
                events.CLUSTER,
                events.QUOTAS,
                events.QUEUES,
            ),
            group_id=None,
            client_id="governor-decider-tables",
            dlq_producer=self.producer,
            security=sec,
        )
        # One group over both topics: another process with the same group id takes a share of
        # the load partitions (stage 1) and of the recommendations partitions (stage 2).
        self.load = Consumer(
            settings.kafka.bootstrap,
            [self.load_topic, self.recommendations_topic],
            group_id=settings.group_id,
            client_id="governor-decider",
            # A new group starts at the newest windows; a restarted one resumes from its commits.
            auto_offset_reset="latest",
            dlq_producer=self.producer,
            security=sec,
            on_assigned=self._assigned,
            on_revoked=self._revoked,
            before_commit=self._before_commit,
            session_timeout_ms=30_000,
            max_poll_records=settings.max_poll_records,
            **(
                {"group_instance_id": settings.group_instance_id}
                if settings.group_instance_id
                else {}
            ),
        )
        # The checkpoints of an assignment are read outside the rebalance (restorer.py says why).
        self.restorer = Restorer(self.load, self._read_checkpoints, self._restored)
        path = settings.journal  # one journal per stage (replay each through a core of that role)
        self.journals = [Journal(Path(path)), Journal(stage2_path(Path(path)))] if path else []
        self._flushed_at = time.monotonic()
        self.tables_loaded = False  # restore() is done before run_core ticks
        # (metric, workload, *labels) -> the labelled child (labels() per evaluation was a tenth
        # of the decider's time at 1,000 workloads); _forget removes exactly these label sets.
        self._children: dict[tuple[Any, ...], Any] = {}
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()

    @property
    def ready(self) -> bool:
        return (
            self.tables_loaded
            and self.producer.ready
            and self.load.ready
            and self.restorer.restored
        )

    async def restore(self) -> None:
        sec = self.s.kafka.security

        async def table(topic: events.Topic[Any]) -> dict[str, Any]:
            return await read_table(self.s.kafka.bootstrap, topic, security=sec)

        for key, rec in (await table(self.policies_topic)).items():
            self._policy(key, rec)
        for state in (await table(self.workloads_topic)).values():
            self._workload(state)
        for node in (await table(events.CLUSTER)).values():
            self._node(node)
        for key, quota in (await table(events.QUOTAS)).items():
            self._quota(key, quota)
        for key, queue in (await table(events.QUEUES)).items():
            self._queue(key, queue)
        self.tables_loaded = True
        log.info("restored", extra={"policies": len(self.stage1.policies)})

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
        gone = self.stage1.policy_keys.get(key)
        for core in self.cores:
            core.on_policy(key, policy)
        if gone is not None and gone not in self.stage1.policies:
            self._forget(gone)
        for j in self.journals:
            j.policy(key, policy)

    def _forget(self, workload: str) -> None:
        """Drop a deleted policy's per-workload series (bounded label sets)."""
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
        memory = self.stage2.pools.get(pool)
        if memory is not None and memory.allocation is not None:
            recs = self.stage2.recommendations.get(pool, {})
            pool_metrics(pool, memory.allocation, recs, self._child)

    def _workload(self, state: events.WorkloadState) -> None:
        for core in self.cores:
            core.on_workload(state)
        for j in self.journals:
            j.workload(state)

    def _node(self, node: events.NodeState) -> None:
        for core in self.cores:
            core.on_node(node)
        for j in self.journals:
            j.node(node)

    def _quota(self, key: str, quota: events.QuotaState | None) -> None:
        for core in self.cores:
            core.on_quota(key, quota)
        for j in self.journals:
            j.quota(key, quota)

    def _queue(self, key: str, queue: events.QueueState | None) -> None:
        for core in self.cores:
            core.on_queue(key, queue)
        for j in self.journals:
            j.queue(key, queue)

    def _node_deleted(self, name: str) -> None:
        for core in self.cores:
            core.on_node_deleted(name)
        for j in self.journals:
            j.node_deleted(name)

    async def on_table(self, msg: Message[Any]) -> None:
        if msg.topic == self.policies_topic.name and msg.key is not None:
            self._policy(msg.key, msg.value)
        elif msg.topic == self.workloads_topic.name and msg.value is not None:
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

    def on_load(self, batch: list[Message[Any]]) -> Step:
        """One fetch: load windows into stage 1, recommendations into stage 2; each workload
        evaluated once, however many of its records the fetch held. Stage 1's round and stage
        2's first go out together (their acknowledgements overlap, as the stages are
        independent), then each pool's."""
        load: dict[str, None] = {}
        recommended: dict[str, None] = {}
        stage1, stage2 = self.cores
        j1, j2 = self.journals if self.journals else (None, None)
        for msg in batch:
            value = msg.value
            if isinstance(value, events.LoadWindow):
                # One message per series carries several windows (LoadWindow.more).
                stage1.on_load(value)
                if j1 is not None:
                    for window in views(value):
                        j1.window(window)
                load[value.workload] = None
            elif isinstance(value, events.Recommendation):
                stage2.on_recommendation(value)
                if not value.decided:  # one stage 1 decided itself (pass-through) is done
                    recommended[value.workload] = None
                if j2 is not None:
                    j2.recommendation(value)
        now = time.time()
        out = self._decide_all(load, now, "load", stage1)
        stage1.evaluated_on_load(load, now)
        return out + self._stage2(recommended, now, "load")

    def _stage2(self, workloads: Iterable[str], now: float, trigger: str) -> Step:
        """Stage 2 for these workloads: bounds-only ones each, then each pool with inventory."""
        core = self.stage2
        alone: list[str] = []
        pools: dict[str, None] = {}
        for workload in workloads:
            pool = core.pool_of(workload)
            if pool is not None and core.has_inventory(pool):
                pools[pool] = None
            elif pool is not None:
                alone.append(workload)
        out = self._decide_all(alone, now, trigger, core)
        for pool in pools:
            started = time.perf_counter()
            out = out.then(self._pool(pool, core.decide_pool(pool, now), now, trigger, started))
        return out

    # --- run_core's core: what to persist and publish, in rounds; run_core delivers it -------

    async def on(self, fetch: Fetch) -> Step:
        """A fetch of the tables (each message in turn) or of the group (one batch; a batch
        that raises is answered message by message, and what raises alone dead-lettered)."""
        if fetch.consumer is self.tables:
            await fetch.handle_each(self.on_table)
            return cores.Outputs()
        steps: list[Step] = []

        async def answer(batch: list[Message[Any]]) -> None:
            steps.append(self.on_load(batch))

        await fetch.handle(answer)
        return sum(steps, cores.Outputs())

    def tick(self, now: float) -> Step:
        """The cores' `tick` (the scenario runner's too) given the group's lag: stage 1's
        evaluations in one round, then each owned pool's stage 2 in turn. A bounds-only request
        not taken up is sent again on the next recommendation after `pending_grace`."""
        lag = self.load.lag()
        load, recs = self.load_topic.name, self.recommendations_topic.name
        behind = PartitionLag(
            {tp.partition: n for tp, n in lag.items() if tp.topic == load},
            {tp.partition: n for tp, n in lag.items() if tp.topic == recs},
        )
        outs = list(self.stage1.tick(now, behind))
        for j in self.journals[:1]:
            for workload, _ in outs:
                j.decide(workload, now)
        out = self._evaluations(outs, "tick")
        pools = self.stage2.tick(now, behind)
        while True:
            started = time.perf_counter()
            step = next(pools, None)
            if step is None:
                break
            key, one = step
            out = out.then(self._pool(key.removeprefix(POOL_PREFIX), one, now, "tick", started))
        consumer_lag(self.load, lag)
        consumer_lag(self.tables)
        return out

    # --- partitions: the cores' memory follows them ------------------------------------------

    async def _assigned(self, tps: set[Any]) -> None:
        """A rebalance gave this instance `tps`: paused until their checkpoints are read (the
        previous owners wrote theirs before giving the partitions up) and handed over."""
        await self.restorer.assigned(tps)

    def _ownership(self, tps: Iterable[Any]) -> Ownership:
        """`tps` (of the load and recommendations topics) as the cores' `Ownership`."""
        load, recs = self.load_topic.name, self.recommendations_topic.name
        tps = list(tps)
        return Ownership(
            self.load.partition_count(load),
            frozenset(tp.partition for tp in tps if tp.topic == load),
            self.load.partition_count(recs),
            frozenset(tp.partition for tp in tps if tp.topic == recs),
        )

    async def _read_checkpoints(self) -> dict[str, events.DeciderCheckpoint]:
        sec = self.s.kafka.security
        return await read_table(
            self.s.kafka.bootstrap, self.checkpoints_topic, security=sec, timeout_s=300
        )

    async def _restored(self, tps: set[Any], table: dict[str, events.DeciderCheckpoint]) -> None:
        """The cores own `tps` from now on, with their checkpoints; nothing awaited under the
        lock, so a revocation finds this either not begun or done."""
        own = self._ownership(tps)
        async with self._lock:
            now = time.time()
            for core in self.cores:
                core.assign(own, now)
            for j in self.journals:
                j.assign(own, now)
            for cp in table.values():
                for i in restoring_stages(cp):
                    self.cores[i].on_checkpoint(cp)
                    for j in self.journals[i : i + 1]:
                        j.checkpoint(cp)
        log.info("assigned", extra={"partitions": sorted(f"{t}:{p}" for t, p in tps)})

    async def _revoked(self, tps: set[Any]) -> None:
        """Before the offsets are committed and the partitions go: stage 1's checkpoints."""
        await self.restorer.revoked(tps)
        async with self._lock:
            await self._flush()
            now = time.time()
            for core in self.cores:
                core.assign(Ownership(), now)
            for j in self.journals:
                j.assign(Ownership(), now)

    async def _before_commit(self) -> bool:
        """Commit load offsets only together with the checkpoints of what they cover."""
        if time.monotonic() - self._flushed_at < self.s.checkpoint_seconds:
            return False
        async with self._lock:
            await self._flush()
        return True

    async def _flush(self) -> None:
        # Before offsets are committed: a replay must hold every input a commit covers.
        for j in self.journals:
            j.flush()
        due = self.stage1.checkpoints_due(time.time())
        await self.producer.wait(await self.producer.publish_many(self.checkpoints_topic, due))
        self._flushed_at = time.monotonic()

    def _decide_all(
        self, workloads: Iterable[str], now: float, trigger: str, core: DeciderCore
    ) -> Step:
        """One stage for each workload: one round for all (one or two acknowledgement round
        trips per cycle, not one per workload)."""
        outs: list[tuple[str, Outputs]] = []
        journals = self.journals[core is self.stage2 :][:1]
        for workload in workloads:
            for j in journals:
                j.decide(workload, now)
            outs.append((workload, core.decide(workload, now)))
        return self._evaluations(outs, trigger)

    def _evaluations(self, outs: list[tuple[str, Outputs]], trigger: str) -> Step:
        if outs:
            EVALUATIONS.labels(trigger).inc(len(outs))
        return self._round(outs, trigger)

    def _pool(self, pool: str, out: Outputs, now: float, trigger: str, started: float) -> Step:
        """A pool's stage 2 (`decide_pool`, begun at perf_counter `started`): its checkpoints
        acknowledged, then its decisions and shortfalls."""
        POOL_SECONDS.observe(time.perf_counter() - started)
        for j in self.journals[1:]:
            j.decide_pool(pool, now)
        self._pool_metrics(pool)
        step = self._round([(d.workload, Outputs(decision=d)) for d in out.decisions], trigger)
        step.checkpoints = [(self.checkpoints_topic, cp) for cp in out.checkpoints]
        for sf in out.shortfalls:
            step.records.append((events.SHORTFALLS, sf))
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
        return step

    def _round(self, outs: list[tuple[str, Outputs]], trigger: str) -> Step:
        """A cycle's outputs as one round: all checkpoints (acknowledged before anything else
        goes out: a restart can never reuse a seq), then the recommendations and decisions;
        once those are acknowledged, the latency of the decisions on new input."""
        checkpoints: list[Routed] = [
            (self.checkpoints_topic, cp)
            for _, out in outs
            for cp in ([out.checkpoint] if out.checkpoint else []) + out.shadow_checkpoints
        ]
        records: list[Routed] = []
        for workload, out in outs:
            self._records(workload, out, records)
        decisions = [out.decision.newest_input for _, out in outs if out.decision is not None]
        # Made due by time (a stabilization window or rate limit running out) on input already
        # evaluated: its age is the sample interval, not the pipeline's latency.
        after = [] if trigger == "tick" or not decisions else [lambda: _latency(decisions)]
        return cores.Outputs(checkpoints, records, after)

    def _records(self, workload: str, out: Outputs, records: list[Routed]) -> None:
        """One evaluation's recommendation and decisions, and their metrics and log lines
        (counted as decided: the sink retries until the broker takes them)."""
        rec = out.recommendation
        if rec is not None:
            records.append((self.recommendations_topic, rec))
            recommendation_metrics(rec, self.stage1.workloads.get(workload), self._child)
        for shadow in out.shadow_decisions:  # never on the decisions topic: never actuated
            records.append((events.SHADOW_DECISIONS, shadow))
            self._child(SHADOW_REPLICAS, workload, shadow.policy).set(shadow.to_replicas)
        d = out.decision
        if d is not None:
            records.append((self.decisions_topic, d))
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
            if log.isEnabledFor(logging.INFO):  # the reasons joined only for a line written
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
            own = (
                self.load_topic, self.recommendations_topic, self.decisions_topic,
                self.policies_topic, self.workloads_topic, self.checkpoints_topic,
            )  # fmt: skip
            topics = {t.name: t for t in (*events.TOPICS, *own)}
            await ensure_topics(self.s.kafka.bootstrap, topics.values())
        await self.producer.start()
        await self.restore()
        await self.tables.start()
        await self.load.start()
        health = HealthServer(self.s.http_host, self.s.http_port, lambda: self.ready)
        await health.start()
        # Start-up's objects (the tables, the restored checkpoints) out of the collector's way;
        # the young threshold is set in start() (governor.gc_tuning says why).
        frozen = gc_tuning.freeze_startup()
        log.info("decider running", extra={"http_port": health.port, "gc_frozen": frozen})
        # The tables' fetches and the group's in turn, a tick every tick_seconds.
        await run_core(
            self,
            merged(self.tables.fetches(), self.load.fetches()),
            self.sink,
            self.s.tick_seconds,
            checkpoints=self.sink,
            until=self._stop.is_set,
            lock=self._lock,  # the rebalance hooks find a step not begun or delivered
        )
        await self.restorer.cancel()
        async with self._lock:
            await self._flush()
        # The consumer's last commit flushes again (what it handled meanwhile) and goes through.
        self._flushed_at = -math.inf
        await self.load.stop()
        await self.tables.stop()
        await self.producer.stop()
        await health.stop()
        for j in self.journals:
            j.close()

    def stop(self) -> None:
        self._stop.set()


def _latency(newest_inputs: list[float]) -> None:
    """Newest sample -> decision acknowledged, for each decision on new input."""
    published = time.time()
    for newest in newest_inputs:
        LATENCY.observe(max(0.0, published - newest))


def start(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Run the service with the settings `args` name (parsed by governor_decider.cli)."""
    settings = service_settings(parser, args, DeciderSettings, PREFIX)
    configure_logging("decider", settings.log_level)
    gc_tuning.configure()  # as bench/policy_throughput.py and bench/decider_cores.py measure
    decider = Decider(settings)

    async def amain() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, decider.stop)
        await decider.run()

    asyncio.run(amain())
