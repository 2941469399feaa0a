"""MetricBatch records on the real broker: the collector's publisher writes one record per
partition per flush, the aggregator folds every sample of them, and a batch with one bad sample
has that sample alone dead-lettered, with its index."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer

from governor import events
from governor.bus import Consumer, Producer, codec_for
from governor.cores.aggregator import AggregatorCore
from governor.metric_records import Partitions, batch_key, encode_batch
from governor.window_sizes import WindowSettings
from governor.windows import SeriesWindows, ingest_many, views
from governor_collector.kafka import BusPublisher
from tests.support.procs import governor_service
from tests.support.topics import run_topics

pytestmark = [pytest.mark.integration]


async def _records(bootstrap: str, topic: str, want: int, within_s: float = 60.0) -> list[object]:
    raw = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await raw.start()
    out: list[object] = []
    try:
        deadline = time.monotonic() + within_s
        while len(out) < want and time.monotonic() < deadline:
            for records in (await raw.getmany(timeout_ms=500)).values():
                out += records
    finally:
        await raw.stop()
    return out


async def test_batches_are_aggregated_and_a_bad_sample_goes_alone(
    kafka_bootstrap: str, tmp_path: Path, unique_suffix: str
) -> None:
    metrics, load = await run_topics(
        kafka_bootstrap, "mb", unique_suffix, events.METRICS, events.LOAD
    )
    agg = governor_service(
        "aggregator",
        kafka_bootstrap,
        {
            "METRICS_TOPIC": metrics.name,
            "LOAD_TOPIC": load.name,
            "APP_ID": f"mb-{unique_suffix}",
            "DATA_DIR": str(tmp_path / "agg"),
            "AUTO_OFFSET_RESET": "earliest",
        },
        tmp_path / "aggregator.log",
    ).start()
    workloads = [f"mb-{unique_suffix}/Deployment/w{i}" for i in range(8)]
    t0 = time.time() - 200
    sent: dict[str, list[tuple[float, float]]] = {w: [] for w in workloads}
    parts = Partitions(metrics.partitions)
    try:
        async with Producer(kafka_bootstrap) as producer:
            publisher = BusPublisher(producer, metrics)

            async def publish_seconds(seconds: range) -> None:
                """Each second: one sample per workload (a value that moves), as one publish."""
                for second in seconds:
                    batch = []
                    for i, wl in enumerate(workloads):
                        ts, value = t0 + second + 0.5, float((second + i) % 13)
                        batch.append(
                            events.MetricSample(workload=wl, metric="m", value=value, timestamp=ts)
                        )
                        sent[wl].append((ts, value))
                    await publisher.publish(batch)

            await publish_seconds(range(90))
            # One record per partition per flush, not one per sample.
            assert 0 < publisher.records <= 90 * metrics.partitions
            # A batch whose middle sample is not a sample, and one of another partition.
            good = workloads[0]
            p = parts.of(good)
            stranger = next(w for w in workloads if parts.of(w) != p)
            ok = events.MetricSample(workload=good, metric="m", value=1.0, timestamp=t0 + 95)
            bad_value = msgspec.json.encode(ok).replace(b'"value":1.0', b'"value":"lots"')
            assert bad_value != msgspec.json.encode(ok)
            frame = msgspec.json.decode(encode_batch(p, [ok, ok, ok]))
            frame["samples"][1] = msgspec.json.decode(bad_value)
            frame["samples"][2] = msgspec.json.decode(
                msgspec.json.encode(msgspec.structs.replace(ok, workload=stranger))
            )
            headers = codec_for(metrics).header_list
            await (
                await producer.send_raw(
                    metrics.name,
                    msgspec.json.encode(frame),
                    key=batch_key(p).encode(),
                    headers=headers,
                    partition=p,
                )
            )
            sent[good].append((ok.timestamp, ok.value))
            await (await producer.send_raw(metrics.name, b"\xff garbage", key=b"x"))
            # A single sample as apps write it (no tag), then samples that close its windows.
            plain = b'{"workload":"%s","metric":"m","value":4,"timestamp":%f}' % (
                good.encode(),
                t0 + 96,
            )
            await (await producer.send_raw(metrics.name, plain, key=good.encode(), headers=headers))
            sent[good].append((t0 + 96, 4.0))
            await publish_seconds(range(97, 140))

        dlq = await _records(kafka_bootstrap, metrics.dlq, 3)
        by_reason = {dict(r.headers).get("governor-dlq-reason"): r for r in dlq}  # type: ignore[attr-defined]
        assert set(by_reason) == {b"validation", b"key", b"decode"}, dlq
        for reason, index in ((b"validation", b"1"), (b"key", b"2")):
            h = dict(by_reason[reason].headers)  # type: ignore[attr-defined]
            assert h["governor-dlq-index"] == index
        assert b'"lots"' in by_reason[b"validation"].value  # type: ignore[attr-defined]
        assert by_reason[b"decode"].value == b"\xff garbage"  # type: ignore[attr-defined]

        # Every closed window equals governor.windows over the samples that were kept.
        closed: dict[tuple[str, float], events.LoadWindow] = {}
        consumer = Consumer(kafka_bootstrap, [load], group_id=None, check_keys=False)
        await consumer.start()
        # On the stable window the aggregator gives each workload (its close phase in the lateness).
        core = AggregatorCore(WindowSettings())
        want = {
            wl: ingest_many(SeriesWindows(spec=core.specs_of(wl)[0]), sent[wl])[1]
            for wl in workloads
        }
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for m in await consumer.poll(500):
                    for w in views(m.value):
                        if w.closed and w.window == "stable":
                            closed[(w.workload, w.start)] = w
                if all((wl, a.start) in closed for wl in workloads for a in want[wl]):
                    break
        finally:
            await consumer.stop()
        for wl in workloads:
            assert want[wl], wl
            for acc in want[wl]:
                w = closed.get((wl, acc.start))
                assert w is not None, (wl, acc.start, agg.tail())
                assert (w.count, w.max, w.p95) == (acc.count, acc.max, acc.p95), (wl, acc.start)
    finally:
        agg.stop()
    await asyncio.sleep(0)
