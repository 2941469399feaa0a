"""governor.bus against a plain aiokafka loop, both ways, in one run on one broker.

    uv run python bench/bus_throughput.py [--count 1000000] [--bootstrap 127.0.0.1:9092]

Produce: N MetricSamples through `Producer.publish` (encodes, keys, headers) vs a plain
AIOKafkaProducer loop sending the same pre-encoded payloads, keys and headers with the same
settings (idempotent, acks=all, linger 5 ms, 256 KiB batches); timed until the last ack.
Consume: the same N records through `Consumer.run_batches` and `Consumer.run` (decode, validate,
key check, commit per batch) vs a plain AIOKafkaConsumer getmany loop with the same manual
commits that does not decode at all (and one that decodes, for reference).
Also: msgspec JSON vs msgpack encode+decode of MetricSample (the codec choice).

Not a test; CI does not run it. Without --bootstrap it starts (or reuses) the local broker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from governor.bus import Consumer, Message, Producer, codec_for
from governor.events import METRICS, MetricSample, Topic
from governor.topics import ensure_topics

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 6
LINGER_MS = 5
BATCH = 256 * 1024


def samples(n: int) -> list[MetricSample]:
    t0 = 1_800_000_000.0
    return [
        MetricSample(
            workload=f"shop/Deployment/svc-{i % 500}",
            metric="http_requests_per_second",
            value=float(i % 1000) * 0.5,
            timestamp=t0 + i * 0.001,
            unit="1/s",
            source="prometheus",
        )
        for i in range(n)
    ]


def topic(name: str) -> Topic[MetricSample]:
    return Topic(name, MetricSample, METRICS.key, "workload", partitions=PARTITIONS)


async def produce_bus(bootstrap: str, t: Topic[MetricSample], data: list[MetricSample]) -> float:
    async with Producer(bootstrap, linger_ms=LINGER_MS, max_batch_size=BATCH) as p:
        await p.publish(t, data[0])
        await p.flush()  # metadata + producer id before the clock starts, as for plain
        start = time.perf_counter()
        for v in data[1:]:
            await p.publish(t, v)
        await p.flush()
        return time.perf_counter() - start


async def produce_plain(
    bootstrap: str, name: str, payloads: list[tuple[bytes, bytes]], headers: list[Any]
) -> float:
    p = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=LINGER_MS,
        max_batch_size=BATCH,
    )
    await p.start()
    try:
        k, v = payloads[0]
        await (await p.send(name, v, key=k, headers=headers))
        start = time.perf_counter()
        send = p.send
        for k, v in payloads[1:]:
            await send(name, v, key=k, headers=headers)
        await p.flush()
        return time.perf_counter() - start
    finally:
        await p.stop()


async def consume_bus(bootstrap: str, t: Topic[MetricSample], n: int, batches: bool) -> float:
    c = Consumer(bootstrap, [t], group_id=f"bench-{uuid.uuid4().hex[:8]}")
    seen = 0
    done = asyncio.Event()
    start = 0.0

    async def on_batch(msgs: list[Message[Any]]) -> None:
        nonlocal seen, start
        if not start:
            start = time.perf_counter()
        seen += len(msgs)
        if seen >= n:
            done.set()

    async def on_one(msg: Message[Any]) -> None:
        nonlocal seen, start
        if not start:
            start = time.perf_counter()
        seen += 1
        if seen >= n:
            done.set()

    await c.start()
    run = c.run_batches(on_batch) if batches else c.run(on_one)
    task = asyncio.create_task(run)
    await done.wait()
    elapsed = time.perf_counter() - start
    await c.stop()
    await task
    return elapsed


async def consume_plain(bootstrap: str, name: str, n: int, decode: bool) -> float:
    c = AIOKafkaConsumer(
        name,
        bootstrap_servers=bootstrap,
        group_id=f"bench-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=2000,
        isolation_level="read_committed",
    )
    dec = msgspec.json.Decoder(MetricSample)
    await c.start()
    try:
        seen = 0
        start = 0.0
        while seen < n:
            batches = await c.getmany(timeout_ms=500)
            if batches and not start:
                start = time.perf_counter()
            for _tp, records in batches.items():
                if decode:
                    for r in records:
                        dec.decode(r.value)
                seen += len(records)
            if batches:
                await c.commit()
        return time.perf_counter() - start
    finally:
        await c.stop()


def codec_bench(data: list[MetricSample]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, enc, dec in (
        ("json", msgspec.json.Encoder(), msgspec.json.Decoder(MetricSample)),
        ("msgpack", msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(MetricSample)),
    ):
        t0 = time.perf_counter()
        blobs = [enc.encode(v) for v in data]
        t1 = time.perf_counter()
        for b in blobs:
            dec.decode(b)
        t2 = time.perf_counter()
        out[f"{name}_encode_us"] = (t1 - t0) / len(data) * 1e6
        out[f"{name}_decode_us"] = (t2 - t1) / len(data) * 1e6
        out[f"{name}_bytes"] = sum(map(len, blobs)) / len(blobs)
    return out


def local_broker() -> str:
    proc = subprocess.run(
        ["bash", str(REPO / "deploy" / "kafka" / "kafka.sh"), "up"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"could not start the local broker: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.strip().splitlines()[-1]


def rate(n: int, s: float) -> str:
    return f"{n / s:>10,.0f} msg/s ({s:6.2f} s)"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--bootstrap", default=os.environ.get("GOVERNOR_KAFKA_BOOTSTRAP"))
    ap.add_argument("--skip-per-message", action="store_true", help="skip Consumer.run()")
    args = ap.parse_args()
    n = args.count
    bootstrap = args.bootstrap or local_broker()
    run_id = uuid.uuid4().hex[:8]
    t_bus, t_plain = topic(f"bench.bus.{run_id}"), topic(f"bench.plain.{run_id}")
    await ensure_topics(bootstrap, [t_bus, t_plain])

    print(f"broker {bootstrap}, {n:,} MetricSamples, {PARTITIONS} partitions")
    data = samples(n)
    codec = codec_for(t_bus)
    payloads = [(METRICS.key(v).encode(), codec.encode(v)) for v in data]
    headers = list(codec.headers)
    print(f"payload {sum(len(v) for _, v in payloads) / n:.0f} bytes JSON + headers")

    c = codec_bench(data[: min(n, 200_000)])
    print(
        f"codec  json    encode {c['json_encode_us']:.2f} us  decode {c['json_decode_us']:.2f} us"
        f"  {c['json_bytes']:.0f} B"
    )
    print(
        f"codec  msgpack encode {c['msgpack_encode_us']:.2f} us  decode "
        f"{c['msgpack_decode_us']:.2f} us  {c['msgpack_bytes']:.0f} B"
    )
    print(
        f"codec  json/msgpack decode time {c['json_decode_us'] / c['msgpack_decode_us']:.2f}x, "
        f"encode {c['json_encode_us'] / c['msgpack_encode_us']:.2f}x"
    )

    pb = await produce_bus(bootstrap, t_bus, data)
    pp = await produce_plain(bootstrap, t_plain.name, payloads, headers)
    print(f"produce  bus    {rate(n, pb)}")
    print(f"produce  plain  {rate(n, pp)}")
    print(f"produce  ratio bus/plain {pp / pb:.2f}x")

    cb = await consume_bus(bootstrap, t_bus, n, batches=True)
    cp = await consume_plain(bootstrap, t_plain.name, n, decode=False)
    cpd = await consume_plain(bootstrap, t_plain.name, n, decode=True)
    print(f"consume  bus run_batches  {rate(n, cb)}")
    if not args.skip_per_message:
        cr = await consume_bus(bootstrap, t_bus, n, batches=False)
        print(f"consume  bus run          {rate(n, cr)}")
    print(f"consume  plain (no decode){rate(n, cp)}")
    print(f"consume  plain (decode)   {rate(n, cpd)}")
    print(f"consume  ratio bus run_batches/plain {cp / cb:.2f}x (vs plain+decode {cpd / cb:.2f}x)")
    if not args.skip_per_message:
        print(f"consume  ratio bus run/plain         {cp / cr:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
