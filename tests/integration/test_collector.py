"""The collector on the real broker and the real Prometheus.

Each test uses its own topics (unique names), so tests and parallel runs never read each other's
samples or policies.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from prometheus_client import REGISTRY

from governor.bus import Producer, topic_partitions
from governor.events import (
    COLLECTOR_SOURCES,
    METRICS,
    POLICIES,
    SCHEMA_VERSION,
    MetricBatch,
    MetricSample,
    PolicyRecord,
)
from governor.metric_records import Partitions, batch_key, decode_record
from governor.spec import KafkaLagSource as KafkaLagSpec
from governor.spec import ScalingPolicy, TargetRef, policy_from_obj
from governor.topics import ensure_topics
from governor_collector.config import CollectorSettings
from governor_collector.kafka import BusPublisher
from governor_collector.main import Collector
from governor_collector.scheduler import Scheduler
from governor_collector.sources import SourceContext, SourceError, SourceTarget
from governor_collector.sources.kafka_lag import KafkaLagSource
from tests.fixtures.prometheus import PrometheusServer
from tests.support.policies import scaling_policy_obj
from tests.support.topics import fresh_suffix
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def uid() -> str:
    return fresh_suffix(10)


def exported(prometheus: PrometheusServer, workload: str, value: float) -> str:
    """The exporter reports `workload`'s load as `value`; once Prometheus has it, its query."""
    prometheus.exporter.load.labels(workload=workload).set(value)
    query = f'governor_test_load{{workload="{workload}"}}'
    prometheus.wait_for(query, value)
    return query


def gauge(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


class TopicReader:
    """Reads a topic from the beginning in the background; `samples` grows as records arrive."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.records: list[Any] = []
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._tps: list[TopicPartition] = []
        self._next: dict[int, int] = {}  # partition -> next offset read

    @property
    def samples(self) -> list[MetricSample]:
        """Every sample read, in record order: the collector writes MetricBatch records."""
        out: list[MetricSample] = []
        for r in self.records:
            rec = decode_record(r.value)
            out += rec.samples if isinstance(rec, MetricBatch) else [rec]
        return out

    async def __aenter__(self) -> TopicReader:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False
        )
        await self._consumer.start()
        parts = await topic_partitions(self._consumer, self.topic, self.bootstrap, None)
        self._tps = [TopicPartition(self.topic, p) for p in parts]
        self._consumer.assign(self._tps)
        await self._consumer.seek_to_beginning(*self._tps)
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        assert self._consumer is not None
        while True:
            batches = await self._consumer.getmany(timeout_ms=200)
            for tp, recs in batches.items():
                self.records.extend(recs)
                self._next[tp.partition] = recs[-1].offset + 1

    async def caught_up(self, within: float = 20.0) -> None:
        """Wait until every record on the topic now (acknowledged before this call) is read.

        Waiting a fixed time instead is what made assertions about "no more samples" flaky: the
        reader's fetch can lag an acknowledged send by more than any sleep on a loaded machine.
        """
        assert self._consumer is not None
        ends = await self._consumer.end_offsets(self._tps)
        await wait_for(
            lambda: all(self._next.get(tp.partition, 0) >= end for tp, end in ends.items()),
            within_s=within,
            what=f"reader caught up with {self.topic}",
        )

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()


async def make_topics(bootstrap: str, metrics: str, policies: str) -> None:
    await ensure_topics(
        bootstrap,
        [dataclasses.replace(METRICS, name=metrics), dataclasses.replace(POLICIES, name=policies)],
        partitions=3,
    )


@contextlib.asynccontextmanager
async def running_collector(bootstrap: str, **over: Any) -> AsyncIterator[Collector]:
    from governor.settings import KafkaSettings

    settings: dict[str, Any] = {
        "metrics_topic": f"test.collector.metrics.{uid()}",
        "policies_topic": f"test.collector.policies.{uid()}",
        # A group of its own: collectors of other tests must not take a share of its sources.
        "group_id": f"test-collector-{uid()}",
        **over,
    }
    s = CollectorSettings(
        kafka=KafkaSettings(bootstrap=bootstrap, client_id=f"test-collector-{uid()}"),
        http_host="127.0.0.1",
        http_port=0,
        start_timeout_seconds=30,
        shutdown_timeout_seconds=5,
        **settings,
    )
    await make_topics(bootstrap, s.metrics_topic, s.policies_topic)
    await ensure_topics(bootstrap, [COLLECTOR_SOURCES])
    c = Collector(s)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


def policy(name: str, workload_name: str, metrics: list[dict[str, Any]]) -> ScalingPolicy:
    return policy_from_obj(
        scaling_policy_obj(
            "itest",
            name,
            targetRef={"kind": "Deployment", "name": workload_name},
            maxReplicas=10,
            metrics=metrics,
        )
    )


def prom_metric(name: str, server: str, query: str, interval: float = 0.3) -> dict[str, Any]:
    return {
        "name": name,
        "target": {"type": "Value", "value": 10},
        "source": {
            "type": "prometheus",
            "query": query,
            "serverAddress": server,
            "intervalSeconds": interval,
        },
    }


# --- prometheus -----------------------------------------------------------------------------------


async def test_prometheus_source_publishes_then_stops_while_prometheus_is_down(
    kafka_bootstrap: str, prometheus: PrometheusServer
) -> None:
    name = f"web-{uid()}"
    workload = f"itest/Deployment/{name}"
    query = exported(prometheus, workload, 7.5)

    async with running_collector(kafka_bootstrap) as c:
        topic = c.settings.metrics_topic
        async with TopicReader(kafka_bootstrap, topic) as reader:
            producer = Producer(kafka_bootstrap)
            await producer.start()
            try:
                pol = policy("p1", name, [prom_metric("load", prometheus.url, query)])
                _, ptopic = c.settings.topics()
                await producer.send(ptopic, PolicyRecord(pol))
            finally:
                await producer.stop()
            up = {"source": "prometheus", "workload": workload, "metric": "load"}
            await wait_for(lambda: len(reader.samples) >= 2, what="samples from prometheus")
            s = reader.samples[0]
            assert (s.workload, s.metric, s.value, s.source) == (
                workload,
                "load",
                7.5,
                "prometheus",
            )
            assert abs(s.timestamp - time.time()) < 30  # Prometheus' evaluation time
            # One MetricBatch record per partition and flush, keyed and placed by partition.
            rec = reader.records[0]
            batch = decode_record(rec.value)
            assert isinstance(batch, MetricBatch) and batch.partition == rec.partition
            assert rec.key == batch_key(rec.partition).encode()
            assert Partitions(len(reader._tps)).of(workload) == rec.partition
            assert dict(rec.headers) == {
                "content-type": b"application/json",
                "schema-version": str(SCHEMA_VERSION).encode(),
            }
            assert gauge("governor_collector_source_up", **up) == 1

            # Prometheus down: no samples, up = 0, errors counted by reason.
            errs = {"source": "prometheus", "reason": "unreachable"}
            before_errors = gauge("governor_collector_source_errors_total", **errs) or 0
            prometheus.stop()
            try:
                await wait_for(lambda: gauge("governor_collector_source_up", **up) == 0)
                # a failed poll set the gauge, so every earlier publish was acknowledged
                await reader.caught_up()
                n_down = len(reader.samples)
                await asyncio.sleep(2.0)
                assert len(reader.samples) == n_down, "samples published while Prometheus down"
                assert (gauge("governor_collector_source_errors_total", **errs) or 0) > (
                    before_errors
                )
            finally:
                prometheus.start()
            # Recovery.
            await wait_for(lambda: gauge("governor_collector_source_up", **up) == 1, within_s=30)
            await wait_for(lambda: len(reader.samples) > n_down, what="samples after recovery")
            assert reader.samples[-1].value == 7.5


async def test_prometheus_query_errors_are_not_values(
    kafka_bootstrap: str, prometheus: PrometheusServer
) -> None:
    ctx = SourceContext()
    from governor.spec import PrometheusSource as PromSpec
    from governor_collector.sources.prometheus import PrometheusSource

    target = SourceTarget(
        "itest/Deployment/x", "m", "itest", TargetRef(kind="Deployment", name="x")
    )
    try:
        for query, reason in [
            ("governor_test_load", "multiple_series"),  # several workloads' series
            ('governor_test_load{workload="nobody"}', "empty_result"),
            ("sum(", "query_error"),
        ]:
            if query == "governor_test_load":
                prometheus.exporter.load.labels(workload="a").set(1)
                prometheus.exporter.load.labels(workload="b").set(2)
                prometheus.wait_for('count(governor_test_load{workload=~"a|b"})', 2)
            src = PrometheusSource(
                target, PromSpec(query=query, server_address=prometheus.url), ctx
            )
            with pytest.raises(SourceError) as e:
                await src.collect(time.time())
            assert e.value.reason == reason, e.value
        src = PrometheusSource(
            target, PromSpec(query="scalar(vector(3))", server_address=prometheus.url), ctx
        )
        [s] = await src.collect(time.time())
        assert s.value == 3.0
    finally:
        await ctx.close()


# --- kafka lag ------------------------------------------------------------------------------------


async def lag_fixture(bootstrap: str, produced: list[int]) -> str:
    """A topic with len(produced) partitions and produced[i] messages in partition i."""
    topic = f"test.collector.lag.{uid()}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, len(produced), 1)])
    finally:
        await admin.close()
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await p.start()
    try:
        for part, n in enumerate(produced):
            futs = [await p.send(topic, b"x", partition=part) for _ in range(n)]
            await asyncio.gather(*futs)
    finally:
        await p.stop()
    return topic


async def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit offsets as a real member of `group` would (consume, then commit)."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        tps = {TopicPartition(topic, p): off for p, off in offsets.items()}
        c.assign(list(tps))
        await c.commit(tps)
    finally:
        await c.stop()


def lag_source(bootstrap: str, topic: str, group: str, ctx: SourceContext, **over: Any) -> Any:
    spec = KafkaLagSpec(topic=topic, consumer_group=group, bootstrap_servers=bootstrap, **over)
    target = SourceTarget(
        "itest/Deployment/consumer", "lag", "itest", TargetRef(kind="Deployment", name="consumer")
    )
    return KafkaLagSource(target, spec, ctx)


async def test_kafka_lag_against_real_consumer_groups(kafka_bootstrap: str) -> None:
    topic = await lag_fixture(kafka_bootstrap, [100, 50, 30])
    group = f"itest-group-{uid()}"
    await commit(kafka_bootstrap, group, topic, {0: 40, 1: 50})  # p2: never committed
    ctx = SourceContext()
    try:
        # defaults: threshold 10, cap 3 partitions x 10; p2 without commit counts 1 (latest)
        src = lag_source(kafka_bootstrap, topic, group, ctx)
        lag, parts = await src.collect(time.time())
        assert (lag.metric, lag.value, lag.unit) == ("lag", 30.0, "messages")
        assert lag.labels["lag_with_persistent"] == "61"
        assert lag.labels["partitions_with_lag"] == "2"
        assert lag.labels["active"] == "true"
        assert (parts.metric, parts.value) == ("lag.partitions", 3.0)

        idle = lag_source(kafka_bootstrap, topic, group, ctx, allow_idle_consumers=True)
        [lag, _] = await idle.collect(time.time())
        assert lag.value == 61.0

        earliest = lag_source(
            kafka_bootstrap, topic, group, ctx, offset_reset_policy="earliest", lag_threshold=100
        )
        [lag, _] = await earliest.collect(time.time())
        assert lag.value == 60 + 0 + 30

        limited = lag_source(kafka_bootstrap, topic, group, ctx, limit_to_partitions_with_lag=True)
        [lag, _] = await limited.collect(time.time())
        assert lag.value == 20.0  # 2 partitions with lag x 10

        # excludePersistentLag: offsets that did not move count 0 for scaling, not activation
        persistent = lag_source(
            kafka_bootstrap, topic, group, ctx, exclude_persistent_lag=True, lag_threshold=100
        )
        [lag, _] = await persistent.collect(time.time())
        assert lag.value == 61.0
        [lag, _] = await persistent.collect(time.time())
        assert lag.value == 1.0  # only p2 (no commit) still counts
        assert lag.labels["lag_with_persistent"] == "61"
        assert lag.labels["active"] == "true"
        await commit(kafka_bootstrap, group, topic, {0: 90})
        [lag, _] = await persistent.collect(time.time())
        assert lag.value == 10 + 1  # p0 moved: its lag counts again

        # everything consumed: no lag, inactive
        await commit(kafka_bootstrap, group, topic, {0: 100, 1: 50, 2: 30})
        [lag, parts] = await src.collect(time.time())
        assert lag.value == 0.0
        assert lag.labels["active"] == "false"

        missing = lag_source(kafka_bootstrap, f"test.collector.absent.{uid()}", group, ctx)
        with pytest.raises(SourceError) as e:
            await missing.collect(time.time())
        assert e.value.reason == "topic_not_found"
    finally:
        await ctx.close()


async def test_kafka_lag_source_publishes_through_the_scheduler(kafka_bootstrap: str) -> None:
    topic = await lag_fixture(kafka_bootstrap, [20, 20])
    group = f"itest-group-{uid()}"
    await commit(kafka_bootstrap, group, topic, {0: 15, 1: 20})
    metrics_topic = f"test.collector.metrics.{uid()}"
    await ensure_topics(kafka_bootstrap, [dataclasses.replace(METRICS, name=metrics_topic)])
    name = f"consumer-{uid()}"
    pol = policy(
        "lag",
        name,
        [
            {
                "name": "lag",
                "target": {"type": "AverageValue", "averageValue": 10},
                "source": {
                    "type": "kafka_lag",
                    "topic": topic,
                    "consumerGroup": group,
                    "bootstrapServers": kafka_bootstrap,
                    "intervalSeconds": 0.3,
                },
            }
        ],
    )
    producer = Producer(kafka_bootstrap)
    await producer.start()
    ctx = SourceContext()
    sched = Scheduler(ctx, BusPublisher(producer, dataclasses.replace(METRICS, name=metrics_topic)))
    try:
        async with TopicReader(kafka_bootstrap, metrics_topic) as reader:
            await sched.apply({pol.key: pol})
            await wait_for(lambda: len(reader.samples) >= 2)
            by_metric = {s.metric: s for s in reader.samples}
            assert by_metric["lag"].value == 5.0
            assert by_metric["lag.partitions"].value == 2.0
            assert {s.workload for s in reader.samples} == {f"itest/Deployment/{name}"}
    finally:
        await sched.close()
        await ctx.close()
        await producer.stop()


# --- push -----------------------------------------------------------------------------------------


def sample_doc(workload: str, i: int) -> dict[str, Any]:
    return {"workload": workload, "metric": "rps", "value": float(i), "timestamp": 1.7e9 + i}


async def test_push_endpoint_on_the_real_broker(kafka_bootstrap: str) -> None:
    async with running_collector(kafka_bootstrap, push_max_body_bytes=4096) as c:
        url = f"http://127.0.0.1:{c.port}"
        w = f"itest/Deployment/push-{uid()}"
        async with (
            TopicReader(kafka_bootstrap, c.settings.metrics_topic) as reader,
            aiohttp.ClientSession() as http,
        ):
            await wait_for(lambda: c.ready(), what="collector ready")
            async with http.get(f"{url}/readyz") as r:
                assert r.status == 200

            good = {"samples": [sample_doc(w, i) for i in range(5)]}
            async with http.post(f"{url}/v1/samples", json=good) as r:
                assert r.status == 200, await r.text()
                assert await r.json() == {"accepted": 5}
            # acknowledged means already on the topic
            await wait_for(lambda: len(reader.samples) == 5, within_s=10)

            bad = {"samples": [sample_doc(w, 10), {**sample_doc(w, 11), "value": "high"}]}
            async with http.post(f"{url}/v1/samples", json=bad) as r:
                assert r.status == 400
                doc = await r.json()
                assert doc["error"] == "invalid_batch"
                assert doc["path"] == "$.samples[1].value"
                assert "Expected `float`, got `str`" in doc["reason"]
            async with http.post(
                f"{url}/v1/samples",
                data=b'{"samples": [{"workload": ',
                headers={"Content-Type": "application/json"},
            ) as r:
                assert r.status == 400
                assert (await r.json())["error"] == "malformed_json"
            big = {"samples": [sample_doc(w, i) for i in range(100, 200)]}
            async with http.post(f"{url}/v1/samples", json=big) as r:
                assert r.status == 413
                assert (await r.json())["limit_bytes"] == 4096

            async with http.get(f"{url}/metrics") as r:
                text = await r.text()
            assert 'governor_collector_push_requests_total{code="400"}' in text
            await asyncio.sleep(1.0)
            assert sorted(s.value for s in reader.samples) == [0, 1, 2, 3, 4]
            assert {s.source for s in reader.samples} == {"push"}


# --- policies live --------------------------------------------------------------------------------


async def test_policy_added_changed_deleted_live(
    kafka_bootstrap: str, prometheus: PrometheusServer
) -> None:
    name = f"live-{uid()}"
    workload = f"itest/Deployment/{name}"
    q1, q2 = exported(prometheus, workload, 3), exported(prometheus, workload + "-v2", 4)

    async with running_collector(kafka_bootstrap) as c:
        _, ptopic = c.settings.topics()
        await wait_for(lambda: c.policies.loaded, what="policies loaded")
        assert c.scheduler.running == {}
        producer = Producer(kafka_bootstrap)
        await producer.start()
        try:
            async with TopicReader(kafka_bootstrap, c.settings.metrics_topic) as reader:
                pol = policy(name, name, [prom_metric("load", prometheus.url, q1)])
                await producer.send(ptopic, PolicyRecord(pol))
                await wait_for(lambda: (workload, "load") in c.scheduler.running, what="started")
                await wait_for(lambda: any(s.value == 3 for s in reader.samples))

                # change: a new query and a second metric (push)
                changed = policy(
                    name,
                    name,
                    [
                        prom_metric("load", prometheus.url, q2),
                        {"name": "q", "target": {"type": "Value", "value": 1}},
                    ],
                )
                await producer.send(ptopic, PolicyRecord(changed))
                await wait_for(lambda: (workload, "q") in c.scheduler.running, what="changed")
                # the restart stopped the old query (its last publish acknowledged) before the
                # new one started: once a 4 is on the topic, no 3 may follow it
                await wait_for(lambda: sum(s.value == 4 for s in reader.samples) >= 3)
                after = reader.samples
                first_new = next(i for i, s in enumerate(after) if s.value == 4)
                assert {s.value for s in after[first_new:]} == {4}
                assert (
                    gauge(
                        "governor_collector_source_up", source="push", workload=workload, metric="q"
                    )
                    == 1
                )

                # delete: tombstone
                await producer.tombstone(ptopic, pol.key)
                await wait_for(lambda: c.scheduler.running == {}, what="stopped")
                await reader.caught_up()
                mark = len(reader.samples)
                await asyncio.sleep(1.5)
                assert len(reader.samples) == mark, "samples after the policy was deleted"
                up = {"source": "prometheus", "workload": workload, "metric": "load"}
                assert gauge("governor_collector_source_up", **up) is None
        finally:
            await producer.stop()


async def test_two_collectors_split_the_pull_sources_and_share_push(
    kafka_bootstrap: str, prometheus: PrometheusServer
) -> None:
    """Issue 19: a second collector with the same group takes a share of the pull sources (none
    polled twice), both serve push, and the one left takes every pull source back."""
    name = f"share-{uid()}"
    workloads = [f"itest/Deployment/{name}-{i}" for i in range(8)]
    for i, wl in enumerate(workloads):
        prometheus.exporter.load.labels(workload=wl).set(i + 1)
    prometheus.wait_for(f'governor_test_load{{workload="{workloads[-1]}"}}', 8)
    topics = {
        "metrics_topic": f"test.collector.metrics.{uid()}",
        "policies_topic": f"test.collector.policies.{uid()}",
        "group_id": f"test-collector-share-{uid()}",
    }
    pull = {(wl, "load") for wl in workloads}
    push = {(wl, "q") for wl in workloads}

    def pulled(c: Collector) -> set[tuple[str, str]]:
        return set(c.scheduler.running) & pull

    async with running_collector(kafka_bootstrap, **topics) as a:
        _, ptopic = a.settings.topics()
        async with Producer(kafka_bootstrap) as producer:
            for i, wl in enumerate(workloads):
                q = f'governor_test_load{{workload="{wl}"}}'
                metrics = [
                    prom_metric("load", prometheus.url, q),
                    {"name": "q", "target": {"type": "Value", "value": 1}},
                ]
                pol = policy(f"{name}-{i}", f"{name}-{i}", metrics)
                await producer.send(ptopic, PolicyRecord(pol))
            await wait_for(lambda: pulled(a) == pull, within_s=60, what="the first collector: all")
            async with running_collector(kafka_bootstrap, **topics) as b:
                await wait_for(
                    lambda: pulled(a) and pulled(b) and not pulled(a) & pulled(b),
                    within_s=90,
                    what="the pull sources split between the two",
                )
                await wait_for(
                    lambda: pulled(a) | pulled(b) == pull, within_s=60, what="all pulled"
                )
                assert push <= set(a.scheduler.running) and push <= set(b.scheduler.running)
            await wait_for(lambda: pulled(a) == pull, within_s=90, what="all back in the one left")
            for i in range(len(workloads)):
                await producer.tombstone(ptopic, f"itest/{name}-{i}")


async def test_restart_reads_the_table_without_replaying_old_versions(
    kafka_bootstrap: str, prometheus: PrometheusServer
) -> None:
    """Policies published before start: the collector starts only the latest versions."""
    metrics_topic = f"test.collector.metrics.{uid()}"
    policies_topic = f"test.collector.policies.{uid()}"
    await make_topics(kafka_bootstrap, metrics_topic, policies_topic)
    ptopic = dataclasses.replace(POLICIES, name=policies_topic)
    producer = Producer(kafka_bootstrap)
    await producer.start()
    try:
        a = policy("a", "a", [prom_metric("m", prometheus.url, "vector(1)")])
        b = policy("b", "b", [prom_metric("m", prometheus.url, "vector(2)")])
        await producer.send(ptopic, PolicyRecord(a))
        await producer.send(ptopic, PolicyRecord(b))
        await producer.send(ptopic, PolicyRecord(policy("a", "a", [prom_metric("m", "x", "y")])))
        await producer.tombstone(ptopic, b.key)
        # a record that is not a PolicyRecord is skipped (counted), not fatal
        fut = await producer.send_raw(policies_topic, b'{"policy": 1}', key=b"itest/bad")
        await fut
    finally:
        await producer.stop()
    skipped = gauge("governor_collector_policy_errors_total", reason="undecodable") or 0
    from governor.settings import KafkaSettings

    s = CollectorSettings(
        kafka=KafkaSettings(bootstrap=kafka_bootstrap),
        http_host="127.0.0.1",
        http_port=0,
        metrics_topic=metrics_topic,
        policies_topic=policies_topic,
    )
    c = Collector(s)
    await c.start()
    try:
        await wait_for(lambda: c.policies.loaded)
        running = c.scheduler.running
        assert list(running) == [("itest/Deployment/a", "m")]
        assert running[("itest/Deployment/a", "m")].config.query == "y"  # type: ignore[union-attr]
        assert c.policies.table.keys() == {"itest/a"}
        assert gauge("governor_collector_policy_errors_total", reason="undecodable") == skipped + 1
    finally:
        await c.stop()


# --- the process: entry point, JSON logs, SIGTERM -------------------------------------------------


async def test_entry_point_sigterm_flushes_accepted_pushes(kafka_bootstrap: str) -> None:
    metrics_topic = f"test.collector.metrics.{uid()}"
    policies_topic = f"test.collector.policies.{uid()}"
    await make_topics(kafka_bootstrap, metrics_topic, policies_topic)
    from tests.support.procs import free_port, service_env

    port = free_port()
    settings = {
        "HTTP_HOST": "127.0.0.1",
        "METRICS_TOPIC": metrics_topic,
        "POLICIES_TOPIC": policies_topic,
    }
    env = {**os.environ, **service_env("collector", kafka_bootstrap, settings, port)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "governor_collector.cli",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    stderr_task = asyncio.create_task(proc.stderr.read())
    url = f"http://127.0.0.1:{port}"
    w = f"itest/Deployment/term-{uid()}"
    accepted = 0
    try:
        async with aiohttp.ClientSession() as http:

            async def ready() -> bool:
                try:
                    async with http.get(f"{url}/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            deadline = time.monotonic() + 60
            while not await ready():
                assert proc.returncode is None, (await stderr_task).decode()
                assert time.monotonic() < deadline, "collector not ready"
                await asyncio.sleep(0.2)

            async def post(i: int) -> int:
                body = {"samples": [sample_doc(w, i * 100 + j) for j in range(100)]}
                try:
                    async with http.post(f"{url}/v1/samples", json=body) as r:
                        return 100 if r.status == 200 else 0
                except aiohttp.ClientError:
                    return 0

            tasks = [asyncio.create_task(post(i)) for i in range(20)]
            await asyncio.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            accepted = sum(await asyncio.gather(*tasks))
        rc = await asyncio.wait_for(proc.wait(), 30)
        assert rc == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    stderr = (await stderr_task).decode()
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    docs = [msgspec.json.decode(ln) for ln in lines]  # every line is one JSON object
    assert any(d.get("msg") == "collector stopped" for d in docs)
    assert all(d.get("service") == "collector" for d in docs)
    async with TopicReader(kafka_bootstrap, metrics_topic) as reader:
        await wait_for(lambda: len(reader.samples) >= accepted, within_s=10)
        await asyncio.sleep(0.5)
        got = {s.value for s in reader.samples if s.workload == w}
    print(f"accepted {accepted} of 2000 around SIGTERM, {len(got)} on the topic")
    assert accepted > 0
    assert len(got) >= accepted  # every acknowledged sample is on the topic
