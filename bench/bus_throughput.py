"""governor.bus against a plain aiokafka loop, both ways, in one run on one broker.

    uv run python bench/bus_throughput.py [--count 1000000] [--bootstrap 127.0.0.1:9092]

Both paths alternate (produce in chunks, consume in rounds) so that they share the machine's
load; wall time and this process's CPU time are both reported (the CPU ratio is the steadier
one on a busy machine).

Produce: N MetricSamples through `Producer.publish` (encodes, keys, headers) vs a plain
AIOKafkaProducer loop sending the same pre-encoded payloads, keys and headers with the same
settings (idempotent, acks=all, linger 5 ms, 256 KiB batches); timed until the last ack.
Consume: the same N records through `Consumer.run_batches` and `Consumer.run` (decode, validate,
key check, commit per batch) vs a plain AIOKafkaConsumer getmany loop with the same settings and
manual commits that does not decode at all (and one that decodes, for reference).
Also: msgspec JSON vs msgpack encode+decode of MetricSample (the codec choice).

On a shared machine give it a broker of its own, so that nobody else's traffic or restart lands
in the measurement:
    GOVERNOR_KAFKA_PORT=19592 GOVERNOR_KAFKA_CONTROLLER_PORT=19593 bash deploy/kafka/kafka.sh up
    uv run python bench/bus_throughput.py --bootstrap 127.0.0.1:19592
    GOVERNOR_KAFKA_PORT=19592 bash deploy/kafka/kafka.sh destroy

Not a test; CI does not run it. Without --bootstrap it starts (or reuses) the local broker.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from benchkit import metric_samples

from governor.bus import Consumer, Message, Producer, codec_for
from governor.events import METRICS, MetricSample, Topic
from governor.topics import ensure_topics

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 6
LINGER_MS = 5
BATCH = 256 * 1024


def topic(name: str) -> Topic[MetricSample]:
    return Topic(name, MetricSample, METRICS.key, "workload", partitions=PARTITIONS)


class Timing:
    """Wall and CPU (this process) seconds of one measured phase."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self._w = 0.0
        self._c = 0.0

    def start(self) -> None:
        self._w, self._c = time.perf_counter(), time.process_time()

    def stop(self) -> Timing:
        self.wall += time.perf_counter() - self._w
        self.cpu += time.process_time() - self._c
        return self


async def produce_bus(
    p: Producer, t: Topic[MetricSample], data: list[MetricSample], timing: Timing
) -> None:
    timing.start()
    publish = p.publish
    for v in data:
        await publish(t, v)
    await p.flush()
    timing.stop()


async def produce_plain(
    p: AIOKafkaProducer,
    name: str,
    payloads: list[tuple[bytes, bytes]],
    headers: list[Any],
    timing: Timing,
) -> None:
    timing.start()
    send = p.send
    for k, v in payloads:
        await send(name, v, key=k, headers=headers)
    await p.flush()
    timing.stop()


async def consume_bus(bootstrap: str, t: Topic[MetricSample], n: int, batches: bool) -> Timing:
    c = Consumer(bootstrap, [t], group_id=f"bench-{uuid.uuid4().hex[:8]}")
    seen = 0
    timing = Timing()

    async def on_batch(msgs: list[Message[Any]]) -> None:
        nonlocal seen
        if not seen:
            timing.start()
        seen += len(msgs)
        if seen >= n:
            timing.stop()
            c.request_stop()

    async def on_one(msg: Message[Any]) -> None:
        nonlocal seen
        if not seen:
            timing.start()
        seen += 1
        if seen >= n:
            timing.stop()
            c.request_stop()

    await c.start()
    await (c.run_batches(on_batch) if batches else c.run(on_one))
    await c.stop()
    return timing


async def consume_plain(bootstrap: str, name: str, n: int, decode: bool) -> Timing:
    c = AIOKafkaConsumer(
        name,
        bootstrap_servers=bootstrap,
        group_id=f"bench-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=2000,
        isolation_level="read_committed",
        fetch_max_wait_ms=100,  # governor.bus's Consumer's setting
    )
    dec = msgspec.json.Decoder(MetricSample).decode
    timing = Timing()
    await c.start()
    try:
        seen = 0
        while seen < n:
            batches = await c.getmany(timeout_ms=500)
            if batches and not seen:
                timing.start()
            for _tp, records in batches.items():
                if decode:
                    for r in records:
                        dec(r.value)
                seen += len(records)
            if batches:
                await c.commit()
        return timing.stop()
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


def rate(n: int, t: Timing) -> str:
    return f"{n / t.wall:>10,.0f} msg/s ({t.wall:6.2f} s wall, {t.cpu / n * 1e6:5.2f} us cpu/msg)"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--bootstrap", default=os.environ.get("GOVERNOR_KAFKA_BOOTSTRAP"))
    ap.add_argument("--rounds", type=int, default=3, help="alternations of bus and plain")
    ap.add_argument("--skip-per-message", action="store_true", help="skip Consumer.run()")
    args = ap.parse_args()
    n = args.count
    bootstrap = args.bootstrap or local_broker()
    run_id = uuid.uuid4().hex[:8]
    t_bus, t_plain = topic(f"bench.bus.{run_id}"), topic(f"bench.plain.{run_id}")
    await ensure_topics(bootstrap, [t_bus, t_plain])

    print(f"broker {bootstrap}, {n:,} MetricSamples, {PARTITIONS} partitions")
    data = metric_samples(n, "shop", source="prometheus")
    codec = codec_for(t_bus)
    payloads = [(METRICS.key(v).encode(), codec.encode(v)) for v in data]
    headers = list(codec.headers)
    # The N samples and payloads live for the whole run: keep the collector from rescanning them.
    gc.collect()
    gc.freeze()
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

    # Produce: alternate the two paths chunk by chunk so that both see the same machine load.
    bus_p = Producer(bootstrap, linger_ms=LINGER_MS, max_batch_size=BATCH)
    plain_p = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=LINGER_MS,
        max_batch_size=BATCH,
    )
    await bus_p.start()
    await plain_p.start()
    await bus_p.send(t_bus, data[0])  # metadata and producer ids before the clock starts
    await (await plain_p.send(t_plain.name, payloads[0][1], key=payloads[0][0], headers=headers))
    pb, pp = Timing(), Timing()
    chunk = max(1, n // (2 * args.rounds))
    for i, lo in enumerate(range(1, n, chunk)):
        hi = min(n, lo + chunk)
        if i % 2:
            await produce_plain(plain_p, t_plain.name, payloads[lo:hi], headers, pp)
            await produce_bus(bus_p, t_bus, data[lo:hi], pb)
        else:
            await produce_bus(bus_p, t_bus, data[lo:hi], pb)
            await produce_plain(plain_p, t_plain.name, payloads[lo:hi], headers, pp)
    await bus_p.stop()
    await plain_p.stop()
    print(f"produce  bus    {rate(n, pb)}")
    print(f"produce  plain  {rate(n, pp)}")
    print(f"produce  ratio bus/plain: wall {pp.wall / pb.wall:.2f}x, cpu {pp.cpu / pb.cpu:.2f}x")

    # Consume: each path reads the whole topic with a fresh group, alternating first place.
    cb: list[Timing] = []
    cp: list[Timing] = []
    for r in range(args.rounds):
        if r % 2:
            cp.append(await consume_plain(bootstrap, t_plain.name, n, decode=False))
            cb.append(await consume_bus(bootstrap, t_bus, n, batches=True))
        else:
            cb.append(await consume_bus(bootstrap, t_bus, n, batches=True))
            cp.append(await consume_plain(bootstrap, t_plain.name, n, decode=False))
    cpd = await consume_plain(bootstrap, t_plain.name, n, decode=True)
    best_b = min(cb, key=lambda x: x.wall)
    best_p = min(cp, key=lambda x: x.wall)
    wall_ratios = sorted(p.wall / b.wall for b, p in zip(cb, cp, strict=True))
    cpu_ratios = sorted(p.cpu / b.cpu for b, p in zip(cb, cp, strict=True))
    print(f"consume  bus run_batches      {rate(n, best_b)}  (best of {args.rounds})")
    print(f"consume  plain, no decode     {rate(n, best_p)}  (best of {args.rounds})")
    print(f"consume  plain, msgspec decode{rate(n, cpd)}")
    print(
        f"consume  ratio bus/plain (best vs best): wall {best_p.wall / best_b.wall:.2f}x, "
        f"cpu {best_p.cpu / best_b.cpu:.2f}x; median of rounds: wall "
        f"{wall_ratios[len(wall_ratios) // 2]:.2f}x, cpu {cpu_ratios[len(cpu_ratios) // 2]:.2f}x"
    )
    print(
        f"consume  ratio bus/plain+decode: wall {cpd.wall / best_b.wall:.2f}x, "
        f"cpu {cpd.cpu / best_b.cpu:.2f}x"
    )
    if not args.skip_per_message:
        cr = await consume_bus(bootstrap, t_bus, n, batches=False)
        print(f"consume  bus run (per message){rate(n, cr)}")
        print(
            f"consume  ratio bus run/plain: wall {best_p.wall / cr.wall:.2f}x, "
            f"cpu {best_p.cpu / cr.cpu:.2f}x"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    asyncio.run(main())
