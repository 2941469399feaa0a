"""Samples/s the collector's push endpoint accepts into Kafka, against governor.bus alone.

    uv run python bench/push_ingest.py [--count 200000] [--batch 500] [--concurrency 8]
                                       [--bootstrap 127.0.0.1:9092]

1. push: `governor-collector` runs as its own process (as deployed); this process posts
   `{"samples": [...]}` batches of `--batch` samples with `--concurrency` concurrent aiohttp
   requests. A 200 means Kafka acknowledged every sample of the batch (acks=all), so the clock
   stops at the last 200. Bodies are encoded before the clock starts.
2. bus, pipelined: the same samples straight through `governor.bus.Producer.publish` in this
   process, then `flush()` — the bus's plain producer figure (what bench/bus_throughput.py
   measures).
3. bus, acked per batch: the same batches through the bus, `--concurrency` batches in flight,
   each awaiting every ack — the push endpoint's own semantics without HTTP.

Prints samples/s of each and the ratios. Fresh topics per run (6 partitions). Not a test; CI does
not run it. Needs a broker: `--bootstrap`, else the local one (`deploy/kafka/kafka.sh up`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import msgspec
from benchkit import REPO, component_up, metric_samples

from governor.bus import Producer
from governor.events import METRICS, POLICIES, MetricSample, Topic
from governor.topics import ensure_topics

sys.path.insert(0, str(REPO))
from tests.support.procs import governor_service

PARTITIONS = 6


async def bench_push(
    bootstrap: str, metrics_topic: str, policies_topic: str, bodies: list[bytes], concurrency: int
) -> float:
    settings = {
        "HTTP_HOST": "127.0.0.1",
        "METRICS_TOPIC": metrics_topic,
        "POLICIES_TOPIC": policies_topic,
        "LOG_LEVEL": "WARNING",
    }
    log = Path(tempfile.mkdtemp(prefix="push-bench-")) / "collector.log"
    collector = governor_service("collector", bootstrap, settings, log).start(ready_timeout=60)
    url = f"http://127.0.0.1:{collector.port}/v1/samples"
    headers = {"Content-Type": "application/json"}
    try:
        conn = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=conn) as http:
            async with http.post(url, data=bodies[0], headers=headers) as r:  # warm up
                assert r.status == 200, await r.text()
            queue: asyncio.Queue[bytes] = asyncio.Queue()
            for b in bodies[1:]:
                queue.put_nowait(b)

            async def worker() -> None:
                while not queue.empty():
                    body = queue.get_nowait()
                    async with http.post(url, data=body, headers=headers) as r:
                        if r.status != 200:
                            raise SystemExit(f"push answered {r.status}: {await r.text()}")
                        await r.read()

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return time.perf_counter() - start
    finally:
        collector.stop()


async def bench_bus_pipelined(
    bootstrap: str, t: Topic[MetricSample], data: list[MetricSample], warm: int
) -> float:
    async with Producer(bootstrap) as p:
        for v in data[:warm]:
            await p.publish(t, v)
        await p.flush()
        start = time.perf_counter()
        for v in data[warm:]:
            await p.publish(t, v)
        await p.flush()
        return time.perf_counter() - start


async def bench_bus_batches(
    bootstrap: str, t: Topic[MetricSample], batches: list[list[MetricSample]], concurrency: int
) -> float:
    async with Producer(bootstrap) as p:
        for v in batches[0]:
            await p.send(t, v)
        queue: asyncio.Queue[list[MetricSample]] = asyncio.Queue()
        for b in batches[1:]:
            queue.put_nowait(b)

        async def worker() -> None:
            while not queue.empty():
                batch = queue.get_nowait()
                futures = [await p.publish(t, s) for s in batch]
                await asyncio.gather(*futures)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - start


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--bootstrap", default=None)
    args = ap.parse_args()
    bootstrap = args.bootstrap or component_up("kafka/kafka.sh")
    run = uuid.uuid4().hex[:8]

    def topic(kind: str) -> Topic[MetricSample]:
        return dataclasses.replace(METRICS, name=f"bench.push.{kind}.{run}", partitions=PARTITIONS)

    push_t, bus_t, batch_t = topic("push"), topic("bus"), topic("bus-batches")
    policies_t = dataclasses.replace(POLICIES, name=f"bench.push.policies.{run}")
    await ensure_topics(bootstrap, [push_t, bus_t, batch_t, policies_t])

    # The first batch warms up every path.
    data = metric_samples(args.count + args.batch, f"bench-{run}")
    batches = [data[i : i + args.batch] for i in range(0, len(data), args.batch)]
    enc = msgspec.json.Encoder()
    bodies = [enc.encode({"samples": b}) for b in batches]
    n = len(data) - len(batches[0])
    size = sum(len(b) for b in bodies[1:]) / (len(bodies) - 1)
    print(
        f"{n} samples, batches of {args.batch} ({size / 1024:.0f} KiB bodies), "
        f"concurrency {args.concurrency}, broker {bootstrap}, {PARTITIONS} partitions"
    )

    t_push = await bench_push(bootstrap, push_t.name, policies_t.name, bodies, args.concurrency)
    t_bus = await bench_bus_pipelined(bootstrap, bus_t, data, len(batches[0]))
    t_batches = await bench_bus_batches(bootstrap, batch_t, batches, args.concurrency)

    push_rate, bus_rate, batch_rate = n / t_push, n / t_bus, n / t_batches
    print(f"push endpoint -> Kafka (acked):      {push_rate:>10,.0f} samples/s  ({t_push:.2f} s)")
    print(f"governor.bus, pipelined + flush:     {bus_rate:>10,.0f} samples/s  ({t_bus:.2f} s)")
    print(
        f"governor.bus, acked per batch:       {batch_rate:>10,.0f} samples/s  ({t_batches:.2f} s)"
    )
    print(f"ratio push / bus pipelined:          {push_rate / bus_rate:10.2f}")
    print(f"ratio push / bus acked per batch:    {push_rate / batch_rate:10.2f}")


if __name__ == "__main__":
    asyncio.run(main())
