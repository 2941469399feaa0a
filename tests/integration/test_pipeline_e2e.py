"""Samples to decisions on the real broker, with collector, aggregator and decider as processes.

A load trace (steady, burst, calm) is replayed for two workloads: one through the collector's
push endpoint, one produced straight into the metrics topic. The test plays the cluster: it
publishes WorkloadState and follows each decision. Mid-run the decider is killed with SIGKILL
and restarted. Then:
- every closed window equals `governor.windows` over the same samples;
- the decisions equal the split `DeciderCore`s (stage 1's pass-through, stage 2) replayed over
  the decider's journals of inputs and ticks;
- every decision has reasons, seq only grows, no decision goes back to older input;
- malformed samples get 400 from the push endpoint or land in the metrics DLQ.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer

from governor import events
from governor.bus import Consumer, Producer
from governor.topics import ensure_topics
from governor.windows import SeriesWindows, hopping, ingest_many, views
from governor_decider import journal
from tests.support.cluster import InstantClusterTask, publish_deployment
from tests.support.policies import average_metric, scaling_policy_obj
from tests.support.procs import governor_service
from tests.support.topics import PIPELINE, run_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRACE_SECONDS = 240  # event-time seconds replayed
PACE = 6.0  # event seconds per wall second


def load_at(t: int) -> float:
    """Steady 20, a burst to 150 from 80 s to 150 s, then 30."""
    if t < 80:
        return 20.0 + (t % 7) * 0.5
    if t < 150:
        return 150.0
    return 30.0


def policy_obj(ns: str, name: str) -> dict[str, Any]:
    return scaling_policy_obj(
        ns,
        name,
        minReplicas=1,
        maxReplicas=30,
        metrics=[average_metric()],
        panic={"windowSeconds": 6, "stableWindowSeconds": 60},
        # Event time runs up to 4 minutes behind the wall clock here: not stale.
        fallback={"staleAfterSeconds": 3600, "replicas": 1},
        behavior={"scaleDown": {"stabilizationWindowSeconds": 30}},
    )


async def _drain(
    bootstrap: str, topic: events.Topic[Any], keep: set[str], seconds: float
) -> list[Any]:
    """Every message on `topic` whose workload is in `keep` (whole topic, from the start)."""
    consumer = Consumer(bootstrap, [topic], group_id=None, check_keys=False)
    await consumer.start()
    out: list[Any] = []
    idle_until = time.monotonic() + seconds
    try:
        while time.monotonic() < idle_until:
            batch = await consumer.poll(1000)
            for m in batch:
                if m.value is not None and m.value.workload in keep:
                    out.append(m.value)
            if batch:
                idle_until = max(idle_until, time.monotonic() + 2)
    finally:
        await consumer.stop()
    return out


async def _until_aggregating(
    bootstrap: str,
    producer: Producer,
    workload: str,
    metrics: events.Topic[events.MetricSample],
    load: events.Topic[events.LoadWindow],
) -> None:
    """A new aggregator group starts at the newest offsets once it has its partitions: wait
    until it demonstrably consumes (a window of a warm-up workload comes out) before the trace,
    so no sample of the trace falls before its starting point."""
    watch = Consumer(bootstrap, [load], group_id=None, check_keys=False)
    await watch.start()
    await watch.client.seek_to_end()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            await producer.send(
                metrics,
                events.MetricSample(
                    workload=workload, metric="rps", value=1.0, timestamp=time.time()
                ),
            )
            for m in await watch.poll(500):
                if m.value is not None and m.value.workload == workload:
                    return
        raise TimeoutError("the aggregator produced no window for the warm-up samples in 60 s")
    finally:
        await watch.stop()


async def test_samples_to_decisions_end_to_end(
    kafka_bootstrap: str, tmp_path: Path, unique_suffix: str
) -> None:
    bootstrap = kafka_bootstrap
    await ensure_topics(bootstrap)
    # Samples and windows on topics of this run alone: any other aggregator on the shared broker
    # (a benchmark, another test) consumes governor.metrics and publishes to governor.load too.
    metrics_topic, load_topic, recs_topic, decisions_topic = await run_topics(
        bootstrap, "e2e", unique_suffix, *PIPELINE
    )
    ns = f"e2e-{unique_suffix}"
    wl_push, wl_direct = f"{ns}/Deployment/pushed", f"{ns}/Deployment/direct"
    ours = {wl_push, wl_direct}

    producer = Producer(bootstrap)
    await producer.start()
    for name in ("pushed", "direct"):
        await publish_deployment(producer, policy_obj(ns, name))

    journal_path = tmp_path / "decider.journal"
    aggregator = governor_service(
        "aggregator",
        bootstrap,
        {
            "APP_ID": f"agg-{unique_suffix}",
            "METRICS_TOPIC": metrics_topic.name,
            "LOAD_TOPIC": load_topic.name,
            "DATA_DIR": str(tmp_path / "agg"),
            "PUBLISH_INTERVAL_MS": "300",
        },
        tmp_path / "aggregator.log",
    )
    decider_settings = {
        "GROUP_ID": f"dec-{unique_suffix}",
        "JOURNAL": str(journal_path),
        "LOAD_TOPIC": load_topic.name,
        "RECOMMENDATIONS_TOPIC": recs_topic.name,
        "DECISIONS_TOPIC": decisions_topic.name,
    }
    decider = governor_service("decider", bootstrap, decider_settings, tmp_path / "decider.log")
    collector = governor_service(
        "collector",
        bootstrap,
        {"HTTP_HOST": "127.0.0.1", "METRICS_TOPIC": metrics_topic.name},
        tmp_path / "collector.log",
    )
    services = [aggregator, decider, collector]
    for s in services:
        s.start()

    # The cluster: follow every decision for our workloads at once (ready immediately).
    cluster = await InstantClusterTask.start(bootstrap, decisions_topic, producer, ours)
    await _until_aggregating(
        bootstrap, producer, f"{ns}/Deployment/warmup", metrics_topic, load_topic
    )
    sent: dict[str, list[tuple[float, float]]] = defaultdict(list)
    t0 = time.time() - TRACE_SECONDS
    try:
        async with aiohttp.ClientSession() as http:
            push_url = f"http://127.0.0.1:{collector.port}/v1/samples"
            # Malformed and schema-invalid bodies are refused with the reason, nothing published.
            bad = await http.post(push_url, data=b"{not json")
            assert bad.status == 400
            invalid = await http.post(
                push_url, json={"samples": [{"workload": wl_push, "metric": "rps"}]}
            )
            assert invalid.status == 400
            assert "value" in await invalid.text() or "timestamp" in await invalid.text()
            # Straight into the topic: garbage lands in the DLQ, the stream goes on.
            await (await producer.send_raw(metrics_topic.name, b"\xff garbage", key=b"x"))

            for t in range(TRACE_SECONDS):
                ts = t0 + t + 0.25
                value = load_at(t)
                sample = {"workload": wl_push, "metric": "rps", "value": value, "timestamp": ts}
                resp = await http.post(push_url, json={"samples": [sample]})
                assert resp.status == 200, await resp.text()
                await producer.send(
                    metrics_topic,
                    events.MetricSample(
                        workload=wl_direct, metric="rps", value=value, timestamp=ts
                    ),
                )
                sent[wl_push].append((ts, value))
                sent[wl_direct].append((ts, value))
                if t == TRACE_SECONDS // 2:
                    decider.kill9()
                    decider.start()
                await asyncio.sleep(1.0 / PACE)
        await asyncio.sleep(8)
    finally:
        await cluster.stop()
        for s in services:
            s.stop()
        for name in ("pushed", "direct"):
            await producer.tombstone(events.POLICIES, f"{ns}/{name}")
        await producer.stop()

    # --- windows: the aggregator's closed windows equal governor.windows over the samples ---
    loads = await _drain(bootstrap, load_topic, ours, 5)
    # A load message carries several windows of its series (LoadWindow.more).
    closed = [v for w in loads for v in views(w) if v.closed]
    assert closed, aggregator.tail()
    specs = {"stable": hopping(60.0, 10.0, 2.0), "panic": hopping(6.0, 2.0, 2.0)}
    for wl in ours:
        for kind, spec in specs.items():
            _, expected, _ = ingest_many(SeriesWindows(spec=spec), sent[wl])
            want = {acc.start: acc for acc in expected}
            got = {w.start: w for w in closed if w.workload == wl and w.window == kind}
            assert got, f"no closed {kind} windows for {wl}"
            assert set(got) <= set(want)
            for start, w in got.items():
                acc = want[start]
                assert w.count == acc.count
                assert math.isclose(w.mean, acc.mean, rel_tol=1e-9)
                assert (w.max, w.p95) == (acc.max, acc.p95)

    # --- decisions: reasons, monotonic seq, never older input, scale up and down happened ---
    decisions = await _drain(bootstrap, decisions_topic, ours, 5)
    assert decisions, decider.tail()
    by_wl: dict[str, list[events.ScaleDecision]] = defaultdict(list)
    for d in decisions:
        by_wl[d.workload].append(d)
    for wl in ours:
        ds = by_wl[wl]
        assert any(d.to_replicas > d.from_replicas for d in ds), f"{wl} never scaled up"
        assert all(d.reasons for d in ds)
        seqs = [d.seq for d in ds]
        assert seqs == sorted(set(seqs)), f"seq not strictly increasing for {wl}: {seqs}"
        newest = [d.newest_input for d in ds]
        assert newest == sorted(newest), f"{wl}: a decision went back to older input"
        assert max(d.to_replicas for d in ds) >= 10  # the burst: 150 rps / 10 per pod

    # --- replay: DeciderCore over the journal gives the same decisions ---
    replayed = [d for d in journal.replayed_decisions(journal_path) if d.workload in ours]
    on_topic = {d.decision_id: d for d in decisions}
    replayed_by_id = {d.decision_id: d for d in replayed}
    for decision_id, d in on_topic.items():
        assert decision_id in replayed_by_id, f"{decision_id} not reproduced by the replay"
        assert replayed_by_id[decision_id] == d
    # A replayed decision may be missing from the topic only if SIGKILL cut it off.
    assert len(replayed_by_id) - len(on_topic) <= len(ours)

    # --- dead letters: the garbage produced straight to the topic ---
    raw = AIOKafkaConsumer(
        metrics_topic.dlq, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
    )
    await raw.start()
    try:
        found = False
        deadline = time.monotonic() + 20
        while not found and time.monotonic() < deadline:
            for records in (await raw.getmany(timeout_ms=1000)).values():
                for r in records:
                    headers = dict(r.headers)
                    if r.value == b"\xff garbage" and headers.get("governor-dlq-reason"):
                        found = True
        assert found, "garbage sample not in governor.metrics.dlq"
    finally:
        await raw.stop()

    # No service logged an error.
    for s in (aggregator, collector):
        assert '"level":"ERROR"' not in s.log_path.read_text(), s.tail()
