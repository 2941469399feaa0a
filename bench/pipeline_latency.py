"""Pipeline latency and memory: N workloads x 1 sample/s through push -> aggregator -> decider.

Runs on the local broker (`bash deploy/kafka/kafka.sh up`) with the services as real processes,
on metrics and load topics of the run's own (other services on a shared broker neither see nor
add to its samples and windows).

For each N in --workloads: policies and WorkloadStates for N workloads are published, then every
second one sample per workload is pushed to the collector for --duration seconds (a slow sine per
workload, so decisions keep coming), in HTTP pushes of PUSH_CHUNK samples spread evenly over the
second. Every workload starts at one replica, away from what its load needs. The driver plays the
cluster too: every CLUSTER_S it publishes a WorkloadState at the size each workload's newest
decision asked for (spec and ready: the actuator's patch, pods that start at once), so the
deciders see their decisions taken up, as in a cluster (runs before this, 2026-12-07, had none: each
decision was re-sent after the pending grace, and those retries came in bursts).
The "pushed" line says how many samples a second went out: a driver short of CPU pushes
less than N a second, and the run then warns (on 2026-12-07 the driver as it was, reading every
load message and pushing as fast as it could, pushed 72-84 % of 10,000 a second: the figures at
10,000 workloads of the days before may be for less load too). Measured, in one run:

- newest sample -> recommendation and -> decision published: for each Recommendation/ScaleDecision
  that carries a newer input than the last one of its workload, (arrival wall time - the
  sample's timestamp); samples are stamped with the wall time at which they are pushed, so this
  is the whole path push -> Kafka -> aggregator -> Kafka -> decider -> Kafka -> a consumer.
  p50/p99, and the largest N whose recommendations and decisions made on new input both have
  p99 <= 1 s. Measured are the samples of the --duration; the push goes on DRAIN_S (5 s) after
  it, so the last of them pass a pipeline that still flows, as all others did. When the push
  stops, the aggregator holds each series' last estimate up to its publish interval (no newer
  sample closes a window) and a decider tick publishes what time makes due: that wait, a source
  gone quiet, is printed on its own line ("after the push stops"), not in the p99 above.
  A decision that time made due (a stabilization window running out, seen by the
  decider's tick or the next sample's evaluation) carries input that was already evaluated, up to
  a sample interval older, so its "latency" includes that wait: it is reported among all
  decisions, and apart from them the decisions made by the first evaluation of their input.
- newest sample -> Kafka CreateTime of the sample, of the open window's LoadWindow and of the
  recommendation: where the time goes (the LoadWindows of two of the load topic's partitions,
  `load_sampled`: reading them all took most of this driver's CPU).
- CPU (utime + stime, in cores) of aggregator(s), decider, collector and this driver over the
  push (its --duration and the drain), and the load average at its start and end: on a shared
  machine the latency depends on the CPU share the services get, and the CPU cost does not;
- every 15 s: consumer lag of the aggregator(s) (metrics) and the decider (load), and the
  resident memory (VmRSS) of each process (one /metrics scrape of each service, in a thread,
  so the push keeps its one-second beat); VmRSS at the end of each N;
- state bytes per workload: the decider's checkpoint, the aggregator's table value, and the
  decider core's memory per workload (tracemalloc; the policy apart from the state proper);
- samples/s one aggregator process sustains from a backlog written by the collector's batch path
  (MetricBatch records), beside a plain aiokafka consumer reading and msgspec-decoding the same
  records, in the same run, per wall second and per CPU-second (the aggregator's: three drains,
  each counted from its first scrape that shows a folded sample, so not its start-up); and
  the same for a backlog of
  single-MetricSample records (one record per sample, as apps produce directly);
- on each N= line: CPU per 1,000 workloads of the aggregator(s) and the decider, and the lag in
  samples (pushed, not yet aggregated) at 30 s, at the end and its maximum (every 15 s);
- sample->recommendation per 10 s of the run, and after its first SETTLE_S (10 s): the N= line
  counts the start too, when every workload's first evaluations and decisions come at once.

    uv run python bench/pipeline_latency.py --workloads 100 1000 --duration 60
    uv run python bench/pipeline_latency.py --workloads 1000 --duration 60 --aggregators 2
    uv run python bench/pipeline_latency.py --workloads 10000 --duration 30 --backlog 1000
    uv run python bench/pipeline_latency.py --workloads 1000 10000 --duration 120 \
        --aggregators 2 --deciders 2

The N= line ends with the CPU per 1,000 workloads of the aggregators and the deciders (each
summed over its processes) and the lag in samples at 30 s, at the end and its maximum (every
15 s): samples pushed and not yet aggregated (the aggregators' samples_total), plus the
deciders' messages behind (governor_bus_consumer_lag: load messages, about one per sample, and
recommendations). The "consumer lag" lines show each service's lag by topic, in records (a
MetricBatch record holds many samples). RSS is per 1,000 workloads too (summed over processes).
The "decider lag per process" line shows each decider's own maximum and end lag (load and
recommendations messages) and the decisions it made: stage 2 of a pool runs in the one decider
that owns the pool's recommendations partition.

The "machine:" lines (first and last) time a fixed pure-Python loop (`benchkit.python_speed`):
on this shared 2-core host the same code ran 1.6x slower from one hour to the next, and every
figure above moves with it. Compare runs only at a like speed.

Steady state (no growth): `--workloads 1000 --duration 600 --backlog 1000` is a 10-minute run;
the 15 s lines show each process's VmRSS over it: compare the value after warm-up (the first
two minutes fill the windows and the decider's histories) with the last one.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.benchkit import python_speed
from governor import compiled, events
from governor.bus import Consumer, Producer, codec_for
from governor.metric_records import decode_record
from governor.spec import policy_from_obj
from governor.topics import ensure_topics
from governor_collector.kafka import BusPublisher
from tests.support.procs import Service, governor_service
from tests.support.topics import delete_minted

# The push goes on this long after --duration (two of the aggregator's 2.5 s publish intervals),
# so the last measured samples travel a pipeline that still flows, as every other one did.
DRAIN_S = 5.0
# How long recommendations are read after the push stops: a source gone quiet leaves its held
# estimate to the aggregator's interval (2.5 s) and what time makes due to a decider tick.
QUIET_S = 6.0
PUSH_CHUNK = 500  # samples per HTTP push; a second's pushes are spread evenly over it
# The start, apart from the rest of the run ("after the first ... s" line): its burst of first
# evaluations and decisions is over by then (2026-12-07: by t+5 s, in per-second buckets).
SETTLE_S = 10.0
# How often the simulated cluster takes up the decisions it got (a WorkloadState each).
CLUSTER_S = 0.2
# Below this share of N samples a second pushed, the run says its load was short (the "pushed"
# line). The push's last second is cut by its end, so a full push reads ~98 %.
PUSH_SHORT = 0.95


def load_sampled(partitions: int) -> tuple[int, ...]:
    """The load partitions the "where the time goes" line reads: the first of each half, so
    that under a range or a round-robin split between two aggregators each has one."""
    return tuple(sorted({0, partitions // 2}))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def policy(ns: str, i: int) -> events.PolicyRecord:
    return events.PolicyRecord(
        policy=policy_from_obj(
            {
                "apiVersion": "governor.dev/v1alpha1",
                "kind": "ScalingPolicy",
                "metadata": {"name": f"w{i}", "namespace": ns},
                "spec": {
                    "targetRef": {"kind": "Deployment", "name": f"w{i}"},
                    "minReplicas": 1,
                    "maxReplicas": 50,
                    "metrics": [
                        {"name": "rps", "target": {"type": "AverageValue", "averageValue": 10}}
                    ],
                    "panic": {},
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 20}},
                },
            }
        )
    )


async def latency_run(
    bootstrap: str,
    n: int,
    duration: float,
    tmp: Path,
    n_aggregators: int = 1,
    n_deciders: int = 1,
) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    ns = f"bench-{run}"
    workloads = [f"{ns}/Deployment/w{i}" for i in range(n)]
    # Samples and windows on topics of this run alone: other aggregators and deciders on a shared
    # broker (tests, demos) would otherwise consume this run's samples and add their own.
    metrics_topic = dataclasses.replace(events.METRICS, name=f"bench-metrics-{run}")
    load_topic = dataclasses.replace(events.LOAD, name=f"bench-load-{run}")
    recs_topic = dataclasses.replace(events.RECOMMENDATIONS, name=f"bench-recommendations-{run}")
    decisions_topic = dataclasses.replace(events.DECISIONS, name=f"bench-decisions-{run}")
    # The tables and checkpoints too: a compacted topic keeps a deleted key's tombstone a day, and
    # a decider reads them in full when it starts (the checkpoints at every assignment). On the
    # shared ones every earlier run's workloads were still there for the next: with ~116,000 of
    # them (a day's runs) the deciders took 0.87 cores at 5,000 workloads, 0.25 on a fresh broker.
    policies_topic = dataclasses.replace(events.POLICIES, name=f"bench-policies-{run}")
    workloads_topic = dataclasses.replace(events.WORKLOADS, name=f"bench-workloads-{run}")
    checkpoints_topic = dataclasses.replace(events.DECIDER_STATE, name=f"bench-decider-state-{run}")
    await ensure_topics(
        bootstrap,
        [
            metrics_topic, load_topic, recs_topic, decisions_topic,
            policies_topic, workloads_topic, checkpoints_topic,
        ],
    )  # fmt: skip
    quiet = {"LOG_LEVEL": "WARNING"}

    # One consumer group: the metrics partitions are split between the processes.
    aggregators = [
        governor_service(
            "aggregator",
            bootstrap,
            {
                **quiet,
                "APP_ID": f"bench-agg-{run}",
                "METRICS_TOPIC": metrics_topic.name,
                "LOAD_TOPIC": load_topic.name,
                "POLICIES_TOPIC": policies_topic.name,
                "DATA_DIR": str(tmp / f"agg-{run}-{i}"),
            },
            tmp / f"aggregator-{run}-{i}.log",
        )
        for i in range(n_aggregators)
    ]
    aggregator = aggregators[0]
    # One consumer group too: load and recommendations partitions are split between them.
    deciders = [
        governor_service(
            "decider",
            bootstrap,
            {
                **quiet,
                "GROUP_ID": f"bench-dec-{run}",
                "LOAD_TOPIC": load_topic.name,
                "RECOMMENDATIONS_TOPIC": recs_topic.name,
                "DECISIONS_TOPIC": decisions_topic.name,
                "POLICIES_TOPIC": policies_topic.name,
                "WORKLOADS_TOPIC": workloads_topic.name,
                "CHECKPOINTS_TOPIC": checkpoints_topic.name,
            },
            tmp / f"decider-{run}-{i}.log",
        )
        for i in range(n_deciders)
    ]
    decider = deciders[0]
    collector = governor_service(
        "collector",
        bootstrap,
        {**quiet, "HTTP_HOST": "127.0.0.1", "METRICS_TOPIC": metrics_topic.name},
        tmp / f"collector-{run}.log",
    )
    producer = Producer(bootstrap)
    await producer.start()
    now = time.time()
    for i, wl in enumerate(workloads):
        await producer.publish(policies_topic, policy(ns, i))
        await producer.publish(
            workloads_topic,
            events.WorkloadState(workload=wl, spec_replicas=1, ready_replicas=1, observed_at=now),
        )
    await producer.flush()
    for s in (*aggregators, *deciders, collector):
        s.start()

    ours = set(workloads)
    rec_lat: list[float] = []
    dec_lat: list[float] = []
    # (arrival, latency) of each recommendation: the latency over the run, 10 s at a time.
    rec_timeline: list[tuple[float, float]] = []
    newest_rec: dict[str, float] = {}
    newest_dec: dict[str, float] = {}
    # The first evaluation of each input (workload, newest_input) -> its time, and every decision
    # as (workload, newest_input, decided_at, latency): a decision made by that first evaluation
    # was made on new input; a later one was made due by time (a stabilization window or a rate
    # limit running out, on a tick or the next sample's evaluation) on input already seen.
    first_eval: dict[tuple[str, float], float] = {}
    decisions: list[tuple[str, float, float, float]] = []
    # Where the time goes: each record's Kafka CreateTime against the newest sample it carries,
    # on the metrics topic (push -> collector -> Kafka), the load topic (-> aggregator -> Kafka)
    # and the recommendations (-> decider -> Kafka).
    stages: dict[str, list[float]] = {"metrics": [], "load": [], "recommendation": []}
    # Samples stamped before this are measured (set when the push starts: --duration after it).
    # The push goes on for DRAIN_S more, so the last measured samples travel a flowing pipeline
    # as every other did; recommendations carrying a newer sample go to `after` (newest, latency).
    measured_until = [math.inf]
    after: list[tuple[float, float]] = []
    consumer = Consumer(
        bootstrap,
        [recs_topic, decisions_topic],
        group_id=None,
        check_keys=False,
        auto_offset_reset="latest",
    )
    await consumer.start()
    await consumer._c().seek_to_end()
    # The metrics topic holds MetricBatch records (the collector's): read raw, decoded here.
    metrics_reader = AIOKafkaConsumer(
        metrics_topic.name, bootstrap_servers=bootstrap, auto_offset_reset="latest"
    )
    await metrics_reader.start()
    # The load topic (a message per series and panic hop: ~5,000/s at 10,000 workloads) is read
    # on two partitions only (`load_sampled`): read in full it was most of this driver's CPU,
    # which the services under test share two cores with. Its stage line is a sample of them.
    load_reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="latest")
    sampled = load_sampled(load_topic.partitions)
    load_reader.assign([TopicPartition(load_topic.name, p) for p in sampled])
    await load_reader.start()
    await load_reader.seek_to_end()
    decode_load = codec_for(load_topic).decode
    stop = asyncio.Event()
    # The cluster the decisions act on: each workload's newest decision, taken up as the
    # actuator's patch and pods that start at once would (a WorkloadState of that size). With
    # none, every workload kept its first size, and each decider re-sent every decision its
    # pending grace (60 s) later: bursts of thousands of retries a minute after each burst of
    # decisions (up to 5,400 in 4 s at 10,000 workloads), which a cluster that scales never sees.
    taken_up: dict[str, int] = {}
    cluster_updates = 0

    async def follow_metrics() -> None:
        while not stop.is_set():
            for records in (await metrics_reader.getmany(timeout_ms=200)).values():
                for r in records:
                    rec = decode_record(r.value)
                    batch = rec.samples if isinstance(rec, events.MetricBatch) else [rec]
                    # The newest sample of a record: what that record could tell downstream.
                    newest = max(x.timestamp for x in batch)
                    if newest < measured_until[0]:
                        stages["metrics"].append(r.timestamp / 1000 - newest)

    async def follow_load() -> None:
        while not stop.is_set():
            for records in (await load_reader.getmany(timeout_ms=200)).values():
                for r in records:
                    v = decode_load(r.value)
                    created = r.timestamp / 1000
                    # The message and its `more`: each a window's view (`windows.views`).
                    for w in (v, *v.more):
                        if not w.closed and w.newest_sample < measured_until[0]:
                            stages["load"].append(created - w.newest_sample)

    async def follow() -> None:
        while not stop.is_set():
            for m in await consumer.poll(200):
                v, arrived = m.value, time.time()
                if v is None or v.workload not in ours:
                    continue
                if isinstance(v, events.ScaleDecision):
                    taken_up[v.workload] = v.to_replicas
                created = m.timestamp_ms / 1000
                if v.newest_input >= measured_until[0]:
                    if isinstance(v, events.Recommendation):
                        after.append((v.newest_input, arrived - v.newest_input))
                    continue
                if isinstance(v, events.Recommendation):
                    k = (v.workload, v.newest_input)
                    first_eval[k] = min(first_eval.get(k, math.inf), v.computed_at)
                    if v.newest_input > newest_rec.get(v.workload, 0.0):
                        stages["recommendation"].append(created - v.newest_input)
                        newest_rec[v.workload] = v.newest_input
                        rec_lat.append(arrived - v.newest_input)
                        rec_timeline.append((arrived, arrived - v.newest_input))
                else:
                    # evaluated_at: the recommendation's computed_at (stage 1), when stage 2
                    # ran in another step (or instance); older deciders leave it 0.
                    at = v.evaluated_at or v.decided_at
                    decisions.append((v.workload, v.newest_input, at, arrived - v.newest_input))
                    if v.newest_input > newest_dec.get(v.workload, 0.0):
                        newest_dec[v.workload] = v.newest_input
                        dec_lat.append(arrived - v.newest_input)

    async def follow_cluster() -> None:
        """The cluster: what the decisions asked for, taken up (published) every CLUSTER_S."""
        nonlocal cluster_updates
        while not stop.is_set():
            await asyncio.sleep(CLUSTER_S)
            if not taken_up:
                continue
            now = time.time()
            states = [
                events.WorkloadState(
                    workload=wl, spec_replicas=r, ready_replicas=r, observed_at=now
                )
                for wl, r in taken_up.items()
            ]
            taken_up.clear()
            cluster_updates += len(states)
            await producer.wait(await producer.publish_many(workloads_topic, states))

    follower = asyncio.create_task(follow())
    cluster = asyncio.create_task(follow_cluster())
    metrics_follower = asyncio.create_task(follow_metrics())
    load_follower = asyncio.create_task(follow_load())
    assert aggregator.proc and decider.proc
    assert collector.proc
    pids = {
        **{
            f"aggregator{i or ''}": a.proc.pid
            for i, a in enumerate(aggregators)
            if a.proc is not None
        },
        **{f"decider{i or ''}": d.proc.pid for i, d in enumerate(deciders) if d.proc is not None},
        "collector": collector.proc.pid,
    }
    cpu0 = {k: cpu_s(v) for k, v in pids.items()}
    own0 = time.process_time()
    load0 = os.getloadavg()[0]
    url = f"http://127.0.0.1:{collector.port}/v1/samples"
    enc = msgspec.json.Encoder()
    start = time.time()
    measured_until[0] = start + duration
    last_round = start
    sent = 0
    lags: list[str] = []
    # Each decider's own lag (load, recommendations messages) at every scrape: the split of the
    # load between them (the one owning a pool's recommendations partition runs its stage 2).
    decider_lags: list[list[tuple[float, float]]] = [[] for _ in deciders]
    # (seconds into the run, samples behind): samples pushed and not yet aggregated, plus the
    # decider's messages behind (load messages, about one per sample, and recommendations).
    lag_totals: list[tuple[float, int]] = []

    async def take_sample(at: float, pushed: int) -> None:
        """Lags and RSS `at` seconds into the run, `pushed` samples sent by then: one scrape of
        each service, in a thread. On the push's loop the scrapes (a decider's /metrics is ~9 MB
        at 10,000 workloads) held the next second's push back, which then went out with the
        one after it: a burst of two seconds of samples that the pipeline never gets from a
        steady source, every 15 s."""
        rss_now = " ".join(f"{k}={rss_mib(v):.0f}MiB" for k, v in pids.items())
        snap = await asyncio.to_thread(Snapshot.take, aggregators, deciders)
        lag_totals.append((at, snap.samples_behind(pushed)))
        snap.decider_lags(decider_lags)
        lags.append(f"t+{at:.0f}s {' '.join(snap.lags)} RSS {rss_now}")

    sampling: asyncio.Task[None] | None = None
    async with aiohttp.ClientSession() as http:
        while time.time() - start < duration + DRAIN_S:
            tick = last_round = time.time()
            # Every 15 s, as Prometheus would (and never two at once on a starved machine).
            due = int(tick - start) // 15 > len(lags) - 1
            if tick - start < duration and due and (sampling is None or sampling.done()):
                sampling = asyncio.create_task(take_sample(tick - start, sent))
            for j, lo in enumerate(range(0, n, PUSH_CHUNK)):
                # Spread over the second, as independent sources push: pushed as fast as this
                # loop goes, the samples reach the aggregators in one burst a second (its p99
                # rose by ~0.7 s when this driver, made lighter, pushed faster).
                await asyncio.sleep(max(0.0, tick + j * PUSH_CHUNK / n - time.time()))
                batch = [
                    {
                        "workload": workloads[i],
                        "metric": "rps",
                        "value": 40 + 35 * math.sin((tick - start) / 30 + i),
                        "timestamp": time.time(),
                    }
                    for i in range(lo, min(n, lo + PUSH_CHUNK))
                ]
                resp = await http.post(
                    url,
                    data=enc.encode({"samples": batch}),
                    headers={"content-type": "application/json"},
                )
                resp.raise_for_status()
                sent += len(batch)
            await asyncio.sleep(max(0.0, 1.0 - (time.time() - tick)))
    # CPU over the push, the steady load (not the quiet wait after it).
    pushed = time.time() - start
    cpu = {k: (cpu_s(v) - cpu0[k]) / pushed for k, v in pids.items()}
    cpu["bench"] = (time.process_time() - own0) / pushed
    if sampling is not None:
        await sampling
    snap = await asyncio.to_thread(Snapshot.take, aggregators, deciders)
    lag_totals.append((time.time() - start, snap.samples_behind(sent)))
    snap.decider_lags(decider_lags)
    await asyncio.sleep(QUIET_S)
    stop.set()
    await follower
    await cluster
    await metrics_follower
    await load_follower
    await consumer.stop()
    await metrics_reader.stop()
    await load_reader.stop()
    elapsed = time.time() - start
    dec_new = [lat for w, newest, at, lat in decisions if first_eval.get((w, newest)) == at]
    quiet = [lat for newest, lat in after if newest >= last_round]
    rss = {k: rss_mib(v) for k, v in pids.items()}
    per_decider = _per_decider(deciders, decider_lags)
    for s in (collector, *aggregators, *deciders):
        s.stop()
    # Every topic of this run (the aggregators' changelogs too): nothing of it is left for the
    # next run on this broker to read.
    await delete_minted(bootstrap, {run})
    await producer.stop()
    return {
        "workloads": n,
        "samples": sent,
        "cluster_updates": cluster_updates,
        "push_seconds": pushed,
        "rec_p50": pct(rec_lat, 0.5),
        "rec_p99": pct(rec_lat, 0.99),
        "rec_count": len(rec_lat),
        "dec_p50": pct(dec_lat, 0.5),
        "dec_p99": pct(dec_lat, 0.99),
        "dec_count": len(dec_lat),
        "dec_new_p50": pct(dec_new, 0.5),
        "dec_new_p99": pct(dec_new, 0.99),
        "dec_new_count": len(dec_new),
        "aggregator_rss_mib": sum(v for k, v in rss.items() if k.startswith("aggregator")),
        "aggregators": n_aggregators,
        "decider_rss_mib": sum(v for k, v in rss.items() if k.startswith("decider")),
        "deciders": n_deciders,
        "aggregator_cpu": sum(v for k, v in cpu.items() if k.startswith("aggregator")),
        "decider_cpu": sum(v for k, v in cpu.items() if k.startswith("decider")),
        "lag_30s": next((lag for at, lag in lag_totals if at >= 30), lag_totals[-1][1]),
        "lag_end": lag_totals[-1][1],
        "lag_max": max(lag for _, lag in lag_totals),
        "collector_cpu": cpu["collector"],
        "bench_cpu": cpu["bench"],
        "load_start": load0,
        "load_end": os.getloadavg()[0],
        "lags": lags,
        "per_decider": per_decider,
        "stages": " ".join(
            f"{k} p50 {pct(v, 0.5):.3f} p99 {pct(v, 0.99):.3f};" for k, v in stages.items()
        ),
        "quiet": f"p50 {pct(quiet, 0.5):.3f} p99 {pct(quiet, 0.99):.3f} ({len(quiet)})",
        "settled": _settled(rec_timeline, start),
        "timeline": [
            f"t+{lo:.0f}s p50 {pct(b, 0.5):.3f} p99 {pct(b, 0.99):.3f} ({len(b)})"
            for lo in range(0, int(elapsed) + 1, 10)
            if (b := [lat for at, lat in rec_timeline if lo <= at - start < lo + 10])
        ],
    }


def _settled(timeline: list[tuple[float, float]], start: float) -> str:
    """The recommendations' latency once the start is over: every workload appears in the run's
    first second, away from its size, so its first seconds hold a burst of first evaluations and
    decisions (the t+0s line) that a running fleet does not have. Beside the N= line, which
    counts the whole run, so a reader sees how much of its p99 the start is."""
    later = [lat for at, lat in timeline if at - start >= SETTLE_S]
    return f"p50 {pct(later, 0.5):.3f} p99 {pct(later, 0.99):.3f} ({len(later)})"


def _scrape(svc: Service) -> str:
    """A service's /metrics, or "" when it does not answer in time (a starved process on a
    loaded machine: the run goes on, that scrape's values are missing)."""
    try:
        return svc.metrics()
    except OSError:  # URLError, TimeoutError, a reset connection
        return ""


def _aggregated(svc: Service) -> float:
    """Samples an aggregator has handled (every outcome), from its /metrics."""
    return _aggregated_in(_scrape(svc))


def _aggregated_in(text: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("governor_aggregator_samples_total{")
    )


def _lags_in(svc: Service, text: str) -> list[str]:
    """governor_bus_consumer_lag in a service's /metrics (messages behind, by topic), as
    name:topic=n."""
    out = []
    for line in text.splitlines():
        if line.startswith("governor_bus_consumer_lag{"):
            topic = line.split('topic="', 1)[1].split('"', 1)[0]
            if topic.startswith("bench-"):
                name = svc.command.removeprefix("governor-")
                out.append(f"{name}:{topic}=" + line.rsplit(" ", 1)[1])
    return out


@dataclasses.dataclass
class Snapshot:
    """What one /metrics scrape of each aggregator and decider says, parsed where it was taken
    (a thread: a decider's text is ~9 MB at 10,000 workloads). A service that did not answer in
    time (a starved process on a loaded machine) is missing from it, not zero."""

    aggregated: float  # samples the aggregators handled
    lags: list[str]  # every service's consumer lags, as name:topic=n
    # Per decider: (load, recommendations) messages behind; None where the scrape failed.
    decider_behind: list[tuple[float, float] | None]

    @classmethod
    def take(cls, aggregators: list[Service], deciders: list[Service]) -> Snapshot:
        aggregated, lags = 0.0, []
        for svc in aggregators:
            text = _scrape(svc)
            aggregated += _aggregated_in(text)
            lags += _lags_in(svc, text)
        behind: list[tuple[float, float] | None] = []
        for svc in deciders:
            text = _scrape(svc)
            own = _lags_in(svc, text)
            lags += own
            named = (x.split(":", 1)[1].rsplit("=", 1) for x in own)
            by_topic = {topic: float(n) for topic, n in named}
            load = sum(v for k, v in by_topic.items() if k.startswith("bench-load-"))
            recs = sum(v for k, v in by_topic.items() if k.startswith("bench-recommendations-"))
            behind.append((load, recs) if text else None)
        return cls(aggregated, lags, behind)

    def samples_behind(self, pushed: int) -> int:
        """Samples pushed and not yet aggregated, plus the deciders' messages behind (load
        messages, about one per sample, and recommendations)."""
        deciders = sum(
            int(float(x.rsplit("=", 1)[1])) for x in self.lags if x.startswith("decider:")
        )
        return max(0, pushed - int(self.aggregated)) + deciders

    def decider_lags(self, into: list[list[tuple[float, float]]]) -> None:
        """Append each decider's (load, recommendations) messages behind, where it answered."""
        for behind, seen in zip(self.decider_behind, into, strict=True):
            if behind is not None:
                seen.append(behind)


def _per_decider(deciders: list[Service], lags: list[list[tuple[float, float]]]) -> str:
    """Per decider process: max and end of its load and recommendations lag, and the decisions
    it published (stage 2 runs where the pool's recommendations partition is owned)."""
    out = []
    for i, (svc, seen) in enumerate(zip(deciders, lags, strict=True)):
        made = sum(
            float(line.rsplit(" ", 1)[1])
            for line in _scrape(svc).splitlines()
            if line.startswith("governor_decider_decisions_total{")
        )
        load_max = max((x for x, _ in seen), default=0.0)
        recs_max = max((y for _, y in seen), default=0.0)
        end = seen[-1] if seen else (0.0, 0.0)
        out.append(
            f"decider{i} load max {load_max:.0f} end {end[0]:.0f}, recommendations max "
            f"{recs_max:.0f} end {end[1]:.0f}, decisions {made:.0f}"
        )
    return "; ".join(out)


async def _backlog(bootstrap: str, topic: str, count: int, run: str, batched: bool) -> None:
    """`count` samples of 1,000 workloads, a second of samples at a time: through the collector's
    publisher (MetricBatch records, one per partition per flush) or one record per sample."""
    t0 = time.time() - count / 1000
    metrics = dataclasses.replace(events.METRICS, name=topic)
    async with Producer(bootstrap, linger_ms=5) as producer:
        publisher = BusPublisher(producer, metrics)
        for lo in range(0, count, 1000):
            samples = [
                events.MetricSample(
                    workload=f"tp-{run}/Deployment/w{i % 1000}",
                    metric="rps",
                    value=float(i % 97),
                    timestamp=t0 + i / 1000,
                )
                for i in range(lo, min(count, lo + 1000))
            ]
            if batched:
                await publisher.publish(samples)
            else:
                await producer.wait([await producer.publish(metrics, x) for x in samples])


async def _plain_drain(bootstrap: str, topic: str, count: int) -> tuple[float, float]:
    """A plain aiokafka consumer reading and msgspec-decoding the backlog: samples per wall
    second and per CPU-second (of this process)."""
    c = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await c.start()
    got, started, own0 = 0, time.perf_counter(), time.process_time()
    while got < count:
        for records in (await c.getmany(timeout_ms=1000, max_records=5000)).values():
            for r in records:
                rec = decode_record(r.value)
                got += len(rec.samples) if isinstance(rec, events.MetricBatch) else 1
    per_s = count / (time.perf_counter() - started)
    per_cpu = count / max(1e-9, time.process_time() - own0)
    await c.stop()
    return per_s, per_cpu


async def _aggregator_drain(
    bootstrap: str, topic: str, load_topic: str, count: int, tmp: Path, run: str
) -> tuple[float, float]:
    """One aggregator process draining the backlog: samples per wall second and per CPU-second,
    from its first /metrics scrape that shows a folded sample to the end. Its start-up (the
    wait for the policies table before the first fold) and the samples folded before that
    scrape count in neither figure: counting them against the CPU from that scrape on (0.1-1 s
    at 100,000 samples) made the figure swing 80k-1M per CPU-second. The backlog must outlast the
    start-up by far: at 100,000 samples a drain took ~1 s, and a first scrape that came late in
    it left a remainder so short that its rate swung (70,000-146,000 samples/s, and once in 34
    drains 36,861); at 500,000 twelve drains gave 127,900-145,800 per CPU-second."""
    agg = governor_service(
        "aggregator",
        bootstrap,
        {
            "APP_ID": f"bench-tp-{run}-{topic}",
            "DATA_DIR": str(tmp / f"tp-{run}-{topic}"),
            "METRICS_TOPIC": topic,
            "LOAD_TOPIC": load_topic,
            "AUTO_OFFSET_RESET": "earliest",
            "LOG_LEVEL": "WARNING",
        },
        tmp / f"tp-{run}-{topic}.log",
    )
    agg.start()
    assert agg.proc
    waited = time.perf_counter()
    done0 = _aggregated(agg)
    while not done0 and time.perf_counter() - waited < 120:
        await asyncio.sleep(0.05)
        done0 = _aggregated(agg)
    if done0 >= count:
        agg.stop()
        raise SystemExit(
            f"a backlog of {count} samples on {topic} was folded before the aggregator's first"
            " /metrics scrape, so no rate can be measured: use a larger --backlog (the default"
            " is 500,000; the single-record drain takes a tenth of it)"
        )
    cpu0 = cpu_s(agg.proc.pid)
    started = time.perf_counter()
    done = done0
    while done < count and time.perf_counter() - started < 600:
        await asyncio.sleep(0.2)
        done = _aggregated(agg)
    elapsed = time.perf_counter() - started
    cpu = cpu_s(agg.proc.pid) - cpu0
    agg.stop()
    return (done - done0) / elapsed, (done - done0) / max(1e-9, cpu)


async def _aggregator_drains(
    bootstrap: str, topic: str, load_topic: str, count: int, tmp: Path, run: str, times: int
) -> tuple[float, float]:
    """`times` drains of the same backlog, each by a new aggregator group: the harmonic means of
    their wall and CPU rates (a short drain's CPU is too few clock ticks to trust alone)."""
    rates = [
        await _aggregator_drain(bootstrap, topic, load_topic, count, tmp, f"{run}-{i}")
        for i in range(times)
    ]
    return len(rates) / sum(1 / r for r, _ in rates), len(rates) / sum(1 / c for _, c in rates)


async def throughput_run(bootstrap: str, count: int, tmp: Path) -> dict[str, float]:
    """One aggregator process draining a backlog vs a plain aiokafka consumer of the same, for
    the collector's batch records and for single-MetricSample records."""
    run = uuid.uuid4().hex[:8]
    batched, single, load_topic = (f"bench-{k}-{run}" for k in ("metrics", "single", "load"))
    await ensure_topics(
        bootstrap,
        [
            dataclasses.replace(events.METRICS, name=batched),
            dataclasses.replace(events.METRICS, name=single),
            dataclasses.replace(events.LOAD, name=load_topic),
        ],
    )
    # A tenth as many single records: faust's per-record cost makes that path ~10x slower.
    singles = max(1000, count // 10)
    try:
        await _backlog(bootstrap, batched, count, run, batched=True)
        await _backlog(bootstrap, single, singles, run + "s", batched=False)
        plain, plain_cpu = await _plain_drain(bootstrap, batched, count)
        # Three drains (one is ~4 s of CPU at the default backlog): their harmonic mean.
        agg, agg_cpu = await _aggregator_drains(bootstrap, batched, load_topic, count, tmp, run, 3)
        single_plain, single_plain_cpu = await _plain_drain(bootstrap, single, singles)
        one, one_cpu = await _aggregator_drain(bootstrap, single, load_topic, singles, tmp, run)
    finally:  # a drain that cannot be measured exits: its topics go all the same
        await delete_minted(bootstrap, {run})
    return {
        "samples": count,
        "aggregator_per_s": agg,
        "aggregator_per_cpu_s": agg_cpu,
        "plain_aiokafka_per_s": plain,
        "plain_aiokafka_per_cpu_s": plain_cpu,
        "single_aggregator_per_s": one,
        "single_aggregator_per_cpu_s": one_cpu,
        "single_plain_per_s": single_plain,
        "single_plain_per_cpu_s": single_plain_cpu,
        "singles": singles,
    }


def state_sizes() -> dict[str, int]:
    """Bytes per workload of the decider's checkpoint and the aggregator's table value, after a
    300 s run at 1 sample/s and 15 s steps (computed with the same code, not the services)."""
    from governor.cores.aggregator import MetricWindows
    from governor.cores.decider import DeciderCore
    from governor.windows import SeriesWindows, hopping, ingest, to_load_window

    core = DeciderCore()
    p = policy("size", 0)
    core.on_policy("size/w0", p.policy)
    wl = "size/Deployment/w0"
    stable = SeriesWindows(spec=hopping(60, 10, 2))
    panic = SeriesWindows(spec=hopping(6, 2, 2))
    cp_bytes = 0
    for t in range(300):
        v = 40 + 35 * math.sin(t / 30)
        stable, closed_s, _ = ingest(stable, v, float(t))
        panic, closed_p, _ = ingest(panic, v, float(t))
        for acc in closed_s:
            core.on_window(to_load_window(acc, wl, "rps", "stable", closed=True))
        for acc in closed_p:
            core.on_window(to_load_window(acc, wl, "rps", "panic", closed=True))
        core.on_workload(
            events.WorkloadState(workload=wl, spec_replicas=4, ready_replicas=4, observed_at=t)
        )
        out = core.decide(wl, float(t))
        if out.checkpoint is not None:
            cp_bytes = len(codec_for(events.DECIDER_STATE).encode(out.checkpoint))
    agg_bytes = len(msgspec.msgpack.encode({"rps": MetricWindows(299, stable, panic)}))
    return {
        "decider_checkpoint_bytes": cp_bytes,
        "aggregator_table_bytes": agg_bytes,
        **decider_memory(500),
    }


def decider_memory(n: int) -> dict[str, int]:
    """The decider core's memory per workload (tracemalloc, n workloads after 90 s of 1 sample/s
    and a decision per second): its policy, and the state proper (workload state, the newest
    windows, seq/history/rate-limit memory, the latest recommendation)."""
    import gc
    import tracemalloc

    from governor.cores.decider import DeciderCore
    from governor.events import WindowKind
    from governor.windows import (
        SeriesWindows,
        WindowAcc,
        estimate,
        hopping,
        ingest,
        to_load_window,
    )

    stable = SeriesWindows(spec=hopping(60, 10, 2))
    panic = SeriesWindows(spec=hopping(6, 2, 2))
    feed: list[tuple[list[tuple[WindowKind, WindowAcc]], float]] = []
    for t in range(90):
        v = 40 + 35 * math.sin(t / 30)
        stable, closed_s, _ = ingest(stable, v, float(t))
        panic, closed_p, _ = ingest(panic, v, float(t))
        wins: list[tuple[WindowKind, WindowAcc]] = [("stable", a) for a in closed_s]
        wins += [("panic", a) for a in closed_p]
        kinds: tuple[tuple[WindowKind, SeriesWindows], ...] = (("stable", stable), ("panic", panic))
        for kind, series in kinds:
            acc = estimate(series, float(t))
            if acc is not None:
                wins.append((kind, acc))
        feed.append((wins, float(t)))
    gc.collect()
    tracemalloc.start()
    core = DeciderCore()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        core.on_policy(f"mem/w{i}", policy("mem", i).policy)
    gc.collect()
    with_policies = tracemalloc.get_traced_memory()[0]
    for wins, t in feed:
        for i in range(n):
            wl = f"mem/Deployment/w{i}"
            for kind, acc in wins:
                core.on_window(to_load_window(acc, wl, "rps", kind, closed=False))
            core.on_workload(
                events.WorkloadState(workload=wl, spec_replicas=4, ready_replicas=4, observed_at=t)
            )
            core.decide(wl, t)
    gc.collect()
    end = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {
        "decider_policy_bytes_per_workload": (with_policies - base) // n,
        "decider_state_bytes_per_workload": (end - with_policies) // n,
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--bootstrap", default=os.environ.get("GOVERNOR_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    )
    ap.add_argument("--workloads", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument(
        "--aggregators",
        type=int,
        default=1,
        help="aggregator processes in the latency runs (one group: partitions split)",
    )
    ap.add_argument(
        "--deciders",
        type=int,
        default=1,
        help="decider processes in the latency runs (one group: load and recommendations "
        "partitions split)",
    )
    ap.add_argument("--backlog", type=int, default=500_000, help="0 skips the throughput run")
    args = ap.parse_args()
    await ensure_topics(args.bootstrap)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print(compiled.describe())
        print(f"machine: {python_speed():.1f} ns per iteration of the reference loop (at start)")
        print("state bytes per workload:", state_sizes())
        tp = await throughput_run(args.bootstrap, args.backlog, tmp) if args.backlog else None
        if tp is not None:
            print(
                f"throughput: aggregator {tp['aggregator_per_s']:.0f} samples/s "
                f"({tp['aggregator_per_cpu_s']:.0f} per CPU-second), plain aiokafka consumer "
                f"{tp['plain_aiokafka_per_s']:.0f} samples/s "
                f"({tp['plain_aiokafka_per_cpu_s']:.0f} per CPU-second), ratio "
                f"{tp['aggregator_per_s'] / tp['plain_aiokafka_per_s']:.3f} "
                f"(the collector's MetricBatch records); single-MetricSample records "
                f"({tp['singles']:.0f} samples): aggregator "
                f"{tp['single_aggregator_per_s']:.0f} samples/s "
                f"({tp['single_aggregator_per_cpu_s']:.0f} per CPU-second), plain aiokafka "
                f"{tp['single_plain_per_s']:.0f} samples/s "
                f"({tp['single_plain_per_cpu_s']:.0f} per CPU-second); "
                f"load average {os.getloadavg()[0]:.1f}"
            )
        best = None
        for n in args.workloads:
            r = await latency_run(
                args.bootstrap, n, args.duration, tmp, args.aggregators, args.deciders
            )
            print(
                f"N={n} ({r['aggregators']} aggregator process(es), {r['deciders']} decider "
                f"process(es)): sample->recommendation "
                f"p50 {r['rec_p50']:.3f}s p99 {r['rec_p99']:.3f}s "
                f"({r['rec_count']}); sample->decision p50 {r['dec_p50']:.3f}s "
                f"p99 {r['dec_p99']:.3f}s ({r['dec_count']}), of them made on new input "
                f"p50 {r['dec_new_p50']:.3f}s p99 {r['dec_new_p99']:.3f}s "
                f"({r['dec_new_count']}); RSS aggregator "
                f"{r['aggregator_rss_mib']:.0f} MiB, decider {r['decider_rss_mib']:.0f} MiB "
                f"(per 1000 workloads aggregator {1000 * r['aggregator_rss_mib'] / n:.1f} MiB, "
                f"decider {1000 * r['decider_rss_mib'] / n:.1f} MiB); "
                f"CPU (cores) aggregator {r['aggregator_cpu']:.2f}, "
                f"decider {r['decider_cpu']:.2f}, collector {r['collector_cpu']:.2f}, "
                f"this driver {r['bench_cpu']:.2f}; "
                f"load average {r['load_start']:.1f} -> {r['load_end']:.1f}"
                f"; CPU per 1000 workloads aggregator {1000 * r['aggregator_cpu'] / n:.3f} "
                f"decider {1000 * r['decider_cpu'] / n:.3f} core"
                f"; lag {r['lag_30s']} -> {r['lag_end']} max {r['lag_max']}"
            )
            for line in r["lags"]:
                print("   consumer lag", line)
            print("   decider lag per process (messages):", r["per_decider"])
            rate = r["samples"] / r["push_seconds"]
            print(f"   pushed {rate:.0f} samples/s ({100 * rate / n:.1f} % of the {n} asked)")
            print(
                f"   cluster took up {r['cluster_updates']} decided sizes (a WorkloadState each,"
                f" every {CLUSTER_S} s)"
            )
            if rate < PUSH_SHORT * n:
                print(
                    f"   WARNING: this driver pushed under {PUSH_SHORT:.0%} of the load asked"
                    " (it was short of CPU): the figures above are for less load than N"
                )
            print("   newest sample -> Kafka CreateTime of:", r["stages"])
            for line in r["timeline"]:
                print("   sample->recommendation", line)
            print(f"   sample->recommendation after the first {SETTLE_S:.0f} s", r["settled"])
            print("   after the push stops, its last samples -> recommendation", r["quiet"])
            if r["rec_p99"] <= 1.0 and not r["dec_new_p99"] > 1.0:
                best = n
        print(f"largest N with p99 <= 1 s (sample->recommendation and ->decision): {best}")
        print(f"machine: {python_speed():.1f} ns per iteration of the reference loop (at end)")


if __name__ == "__main__":
    asyncio.run(main())
