"""The aggregator's policy follower (governor_aggregator.policies) on the real broker: it is
`ready` only once every policy on governor.policies when it started is in the core, whatever the
fetches' timing, and a policy that comes later still reaches the core."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from governor import events
from governor.bus import Producer
from governor.cores.aggregator import AggregatorCore
from governor.kafka_security import KafkaSecurity
from governor.topics import ensure_topics
from governor.window_sizes import WindowSettings
from governor_aggregator.policies import PolicyFollower
from tests.support.policies import average_metric, policy_record, scaling_policy_obj

pytestmark = pytest.mark.integration

POLICIES = 300


def policy(ns: str, name: str) -> events.PolicyRecord:
    return policy_record(
        scaling_policy_obj(
            ns,
            name,
            maxReplicas=10,
            metrics=[average_metric()],
            panic={"windowSeconds": 4, "stableWindowSeconds": 30},
        )
    )


async def test_ready_only_once_the_table_is_in_the_core(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    await ensure_topics(kafka_bootstrap)
    ns = f"pf-{unique_suffix}"
    names = [f"web-{i}" for i in range(POLICIES)]
    producer = Producer(kafka_bootstrap)
    await producer.start()
    for name in names:
        await producer.send(events.POLICIES, policy(ns, name))
    await producer.flush()

    defaults = WindowSettings()
    core = AggregatorCore(defaults)

    async def locked(change: Callable[[], None]) -> None:
        change()

    follower = PolicyFollower(
        core,
        defaults,
        bootstrap=kafka_bootstrap,
        security=KafkaSecurity(),
        client_id=f"pf-{unique_suffix}",
        source="file",
        locked=locked,
    )
    task = asyncio.create_task(follower.run(wait_seconds=300.0))  # no give-up: read_to decides
    try:
        await asyncio.wait_for(follower.ready.wait(), 60.0)
        ours = {w for w in core.sized if w.startswith(f"{ns}/")}
        assert ours == {f"{ns}/Deployment/{n}" for n in names}

        # Followed after ready: a policy published now reaches the core too.
        await producer.send(events.POLICIES, policy(ns, "late"))
        await producer.flush()
        deadline = time.monotonic() + 30.0
        while f"{ns}/Deployment/late" not in core.sized:
            assert time.monotonic() < deadline, "a policy after ready never reached the core"
            await asyncio.sleep(0.1)
    finally:
        await follower.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for name in [*names, "late"]:
            await producer.tombstone(events.POLICIES, f"{ns}/{name}")
        await producer.stop()
