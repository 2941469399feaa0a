"""Two deciders (and two aggregators) on one pipeline, on the real broker; one decider is killed
with SIGKILL mid-run and the other takes its partitions over (issue 19, item 3).

Both deciders run with the same group id and nothing else in common. Then:
- each owned a share of the load partitions before the kill, the survivor all of them after;
- every closed window of the run was evaluated (it is in a decider's stage-1 journal);
- no workload's seq goes back, and no input was decided into two different decisions;
- every decision on the topic is reproduced by replaying the journal of the decider that made it
  through one stage-2 core: after the handover too, the survivor's decisions are those of a
  single instance fed the same inputs (its checkpoints read at the assignment included).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from governor import events
from governor.bus import Consumer, Producer
from governor.ownership import partition_of
from governor.topics import ensure_topics
from governor_decider import journal
from tests.support.cluster import InstantClusterTask, publish_deployment
from tests.support.policies import average_metric, scaling_policy_obj
from tests.support.procs import Service, governor_service
from tests.support.topics import PIPELINE, run_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WORKLOADS = 12
TRACE_SECONDS = 300  # event-time seconds
PACE = 5.0  # event seconds per wall second
KILL_AT = 100  # event second at which one decider is killed


def policy_obj(ns: str, name: str, pool: str) -> dict[str, Any]:
    return scaling_policy_obj(
        ns,
        name,
        minReplicas=1,
        maxReplicas=60,
        pool=pool,
        metrics=[average_metric()],
        panic={"windowSeconds": 6, "stableWindowSeconds": 60},
        # Event time runs minutes behind the wall clock here: not stale.
        fallback={"staleAfterSeconds": 3600, "replicas": 1},
        # No damping that time alone could release: a decision is a function of its input.
        behavior={
            "scaleUp": {"policies": [{"type": "Pods", "value": 100, "periodSeconds": 1}]},
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 1}],
            },
        },
    )


def load_at(t: int, i: int) -> float:
    """A step per workload: low, a burst in the middle (across the kill), then medium."""
    if t < 60:
        return 20.0 + i
    if t < 180:
        return 150.0 + 10 * i
    return 60.0 + i


def entries(path: Path) -> list[journal.Entry]:
    return list(journal.read(path)) if path.exists() else []


def owned_load(path: Path) -> list[int]:
    """The load partitions of the decider's latest assignment (its stage-1 journal; a revocation
    journals an empty one)."""
    assigns = [e for e in entries(path) if isinstance(e, journal.AssignIn)]
    return assigns[-1].load if assigns else []


def split_between(paths: list[Path]) -> bool:
    owned = [set(owned_load(p)) for p in paths]
    return all(owned) and owned[0].isdisjoint(owned[1]) and len(owned[0] | owned[1]) == 6


async def _drain(bootstrap: str, topic: events.Topic[Any], keep: set[str]) -> list[Any]:
    consumer = Consumer(bootstrap, [topic], group_id=None, check_keys=False)
    await consumer.start()
    out: list[Any] = []
    idle_until = time.monotonic() + 5
    try:
        while time.monotonic() < idle_until:
            batch = await consumer.poll(1000)
            out += [m.value for m in batch if m.value is not None and m.value.workload in keep]
            if batch:
                idle_until = max(idle_until, time.monotonic() + 2)
    finally:
        await consumer.stop()
    return out


async def _poll_until(what: str, check: Any, seconds: float, *logs: Service) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what} not within {seconds}s\n" + "\n".join(s.tail() for s in logs)
            )
        await asyncio.sleep(1.0)


async def test_two_deciders_share_the_work_and_hand_it_over_on_sigkill(
    kafka_bootstrap: str, tmp_path: Path, unique_suffix: str
) -> None:
    bootstrap = kafka_bootstrap
    await ensure_topics(bootstrap)
    sfx = unique_suffix
    metrics, load, recs, decisions_topic = await run_topics(bootstrap, "so", sfx, *PIPELINE)
    ns = f"so-{sfx}"
    names = [f"w{i}" for i in range(WORKLOADS)]
    ours = {f"{ns}/Deployment/{n}" for n in names}
    warmup = [f"{ns}/Deployment/warm{i}" for i in range(WORKLOADS)]

    # One pool per partition of the recommendations topic, so that both deciders run stage 2.
    by_partition: dict[int, str] = {}
    for k in range(1000):
        by_partition.setdefault(partition_of(f"{ns}-p{k}", 6), f"{ns}-p{k}")
    pools = [by_partition[p] for p in range(6)]
    producer = Producer(bootstrap)
    await producer.start()
    for i, name in enumerate(names):
        pool = pools[i % len(pools)]
        await publish_deployment(producer, policy_obj(ns, name, pool))

    aggregators = [
        governor_service(
            "aggregator",
            bootstrap,
            {
                "APP_ID": f"so-agg-{sfx}",
                "METRICS_TOPIC": metrics.name,
                "LOAD_TOPIC": load.name,
                "DATA_DIR": str(tmp_path / f"agg{i}"),
                "PUBLISH_INTERVAL_MS": "300",
            },
            tmp_path / f"aggregator{i}.log",
        )
        for i in range(2)
    ]
    journals = [tmp_path / f"decider{i}.journal" for i in range(2)]
    deciders = [
        governor_service(
            "decider",
            bootstrap,
            {
                "GROUP_ID": f"so-dec-{sfx}",
                "JOURNAL": str(journals[i]),
                "LOAD_TOPIC": load.name,
                "RECOMMENDATIONS_TOPIC": recs.name,
                "DECISIONS_TOPIC": decisions_topic.name,
            },
            tmp_path / f"decider{i}.log",
        )
        for i in range(2)
    ]
    services = [*aggregators, *deciders]
    for s in services:
        s.start()

    cluster = await InstantClusterTask.start(bootstrap, decisions_topic, producer, ours)
    killed, survivor = deciders
    killed_at = 0.0
    try:
        # Both deciders hold load partitions, and both aggregators consume (windows come out for
        # warm-up workloads on every partition), before the trace starts.
        await _poll_until(
            "the load partitions split between both deciders",
            lambda: split_between(journals),
            300,  # a broker shared with other runs: the checkpoints table may be large
            *deciders,
        )
        watch = Consumer(bootstrap, [load], group_id=None, check_keys=False)
        await watch.start()
        seen: set[str] = set()
        deadline = time.monotonic() + 120
        while seen < set(warmup):
            assert time.monotonic() < deadline, "no windows for the warm-up workloads"
            for wl in warmup:
                await producer.publish(
                    metrics,
                    events.MetricSample(
                        workload=wl, metric="rps", value=1.0, timestamp=time.time()
                    ),
                )
            seen |= {m.value.workload for m in await watch.poll(500) if m.value is not None}
        await watch.stop()
        assert split_between(journals)

        t0 = time.time() - TRACE_SECONDS - 60
        for t in range(TRACE_SECONDS):
            for i, name in enumerate(names):
                await producer.publish(
                    metrics,
                    events.MetricSample(
                        workload=f"{ns}/Deployment/{name}",
                        metric="rps",
                        value=load_at(t, i),
                        timestamp=t0 + t + 0.25,
                    ),
                )
            await producer.flush()
            if t == KILL_AT:
                killed.kill9()
                killed_at = time.time()
            await asyncio.sleep(1.0 / PACE)
        # The survivor took every load partition over.
        await _poll_until(
            "the survivor owns every load partition",
            lambda: len(owned_load(journals[1])) == 6,
            120,
            survivor,
        )
        # Every closed window of the run reaches a decider's stage 1 (the survivor catches up).
        closed = {
            (w.workload, w.window, w.start) for w in await _drain(bootstrap, load, ours) if w.closed
        }
        assert closed

        def evaluated() -> set[tuple[str, str, float]]:
            out = set()
            for j in journals:
                for e in entries(j):
                    if isinstance(e, journal.WindowIn) and e.window.closed:
                        out.add((e.window.workload, e.window.window, e.window.start))
            return out

        await _poll_until(
            "every closed window evaluated", lambda: closed <= evaluated(), 120, survivor
        )
        await asyncio.sleep(5)  # the last recommendations through stage 2
    finally:
        await cluster.stop()
        for s in services:
            s.stop()
        for name in names:
            await producer.tombstone(events.POLICIES, f"{ns}/{name}")
        await producer.stop()

    on_topic = await _drain(bootstrap, decisions_topic, ours)
    assert on_topic, survivor.tail()
    # At least once: a producer retry may write a record twice; identical copies are one.
    unique: list[events.ScaleDecision] = []
    for d in on_topic:
        if d not in unique:
            unique.append(d)
    by_wl: dict[str, list[events.ScaleDecision]] = defaultdict(list)
    for d in unique:
        by_wl[d.workload].append(d)
    for wl in ours:
        ds = by_wl[wl]
        assert any(d.to_replicas >= 15 for d in ds), f"{wl}: the burst was not decided"
        seqs = [d.seq for d in ds]
        assert seqs == sorted(set(seqs)), f"{wl}: seq went back or repeated: {seqs}"
        by_input: dict[float, set[int]] = defaultdict(set)
        for d in ds:
            by_input[d.newest_input].add(d.to_replicas)
        twice = {k: v for k, v in by_input.items() if len(v) > 1}
        assert not twice, f"{wl}: one input decided into different decisions: {twice}"
    after = [d for d in unique if d.decided_at > killed_at + 1]
    assert after, "no decision after the handover"
    # Both ran stage 2 before the kill (each owned pools), the survivor all of it after.
    made = [
        {d.decision_id for d in journal.replayed_decisions(j) if d.workload in ours}
        for j in journals
    ]
    assert all(made), "a decider made no decision"
    assert {d.decision_id for d in after} <= made[1]

    # Each decision is what a single stage-2 core replaying its decider's journal decides.
    replayed: dict[str, events.ScaleDecision] = {}
    for j in journals:
        for d in journal.replayed_decisions(j):
            if d.workload in ours:
                replayed.setdefault(f"{d.decision_id}@{d.decided_at}", d)
    for d in unique:
        assert replayed.get(f"{d.decision_id}@{d.decided_at}") == d, d.decision_id
    for s in (*aggregators, survivor):
        assert '"level":"ERROR"' not in s.log_path.read_text(), s.tail()
