"""Every ScalingPolicy window field takes effect live (issue 17, item 6), on the real broker.

The aggregator (a process) reads governor.policies: a workload whose policy has
panic.windowSeconds 4 / stableWindowSeconds 30 gets LoadWindows of exactly those sizes, one
without a policy the aggregator's defaults (60 s / 6 s); the policy changed live to 8 / 120
changes the sizes of every window published after the aggregator took it, and never back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from governor import events
from governor.bus import Consumer, Producer
from governor.topics import ensure_topics
from governor.windows import views
from tests.support.policies import average_metric, policy_record, scaling_policy_obj
from tests.support.procs import governor_service
from tests.support.topics import run_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Sizes = dict[str, float]  # window kind -> end - start


def policy(ns: str, panic: dict[str, float]) -> events.PolicyRecord:
    return policy_record(
        scaling_policy_obj(ns, "web", maxReplicas=10, metrics=[average_metric()], panic=panic)
    )


def sizes_of(msg: events.LoadWindow) -> Sizes:
    return {v.window: round(v.end - v.start, 6) for v in views(msg)}


def kinds(seen: list[Sizes]) -> set[tuple[tuple[str, float], ...]]:
    """The distinct sizes seen, whatever the order of a message's windows (a message whose
    panic window closed lists it first)."""
    return {tuple(sorted(x.items())) for x in seen}


async def until(
    producer: Producer,
    metrics: events.Topic[events.MetricSample],
    watch: Consumer,
    workloads: list[str],
    done: Callable[[dict[str, list[Sizes]]], bool],
    seen: dict[str, list[Sizes]],
    seconds: float = 90.0,
) -> None:
    """Samples for `workloads` (now-stamped, one a workload per 0.25 s) until the window sizes
    seen per workload, in the order published, satisfy `done`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for wl in workloads:
            smp = events.MetricSample(workload=wl, metric="rps", value=5.0, timestamp=time.time())
            await producer.send(metrics, smp)
        for m in await watch.poll(250):
            if m.value is not None and m.value.workload in seen:
                seen[m.value.workload].append(sizes_of(m.value))
        if done(seen):
            return
    raise AssertionError(f"windows not as expected within {seconds} s: {seen}")


async def test_the_policy_sizes_the_windows_live(
    kafka_bootstrap: str, tmp_path: Path, unique_suffix: str
) -> None:
    bootstrap = kafka_bootstrap
    await ensure_topics(bootstrap)
    metrics, load = await run_topics(bootstrap, "pw", unique_suffix, events.METRICS, events.LOAD)
    ns = f"pw-{unique_suffix}"
    web, other = f"{ns}/Deployment/web", f"{ns}/Deployment/other"  # `other` has no policy
    producer = Producer(bootstrap)
    await producer.start()
    await producer.send(
        events.POLICIES, policy(ns, {"windowSeconds": 4, "stableWindowSeconds": 30})
    )
    await producer.flush()

    aggregator = governor_service(
        "aggregator",
        bootstrap,
        {
            "APP_ID": f"pw-{unique_suffix}",
            "METRICS_TOPIC": metrics.name,
            "LOAD_TOPIC": load.name,
            "DATA_DIR": str(tmp_path / "agg"),
            "PUBLISH_INTERVAL_MS": "200",
            "CHECKPOINT_INTERVAL_MS": "500",
        },
        tmp_path / "aggregator.log",
    )
    aggregator.start()
    watch = Consumer(bootstrap, [load], group_id=None, check_keys=False)
    await watch.start()
    seen: dict[str, list[Sizes]] = {web: [], other: []}
    try:
        # The policy read at start: web's windows are its, other's the defaults.
        await until(
            producer, metrics, watch, [web, other], lambda s: bool(s[web] and s[other]), seen
        )
        assert kinds(seen[web]) == kinds([{"stable": 30.0, "panic": 4.0}])
        assert kinds(seen[other]) == kinds([{"stable": 60.0, "panic": 6.0}])

        # Changed live: once a window of the new sizes came out, no window of the old ones.
        await producer.send(
            events.POLICIES, policy(ns, {"windowSeconds": 8, "stableWindowSeconds": 120})
        )
        await producer.flush()
        new = {"stable": 120.0, "panic": 8.0}
        before = len(seen[web])

        def changed(s: dict[str, list[Sizes]]) -> bool:
            after = s[web][before:]
            return new in after and len(after) - after.index(new) >= 5

        await until(producer, metrics, watch, [web, other], changed, seen)
        after = seen[web][before:]
        assert all(sizes == new for sizes in after[after.index(new) :]), after
        assert all(sizes == {"stable": 30.0, "panic": 4.0} for sizes in after[: after.index(new)])
        assert kinds(seen[other]) == kinds([{"stable": 60.0, "panic": 6.0}])
        assert not aggregator.exited_unasked(), aggregator.tail()
    finally:
        await watch.stop()
        await producer.tombstone(events.POLICIES, f"{ns}/web")  # leave no policy behind
        await producer.stop()
        aggregator.stop()
