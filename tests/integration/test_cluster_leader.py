"""Two cluster collectors on the real API server and broker, electing a leader on a real
coordination.k8s.io/v1 Lease: exactly one publishes; SIGKILL of the leader hands over within a
lease duration and a renew deadline; never do both publish."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from governor.kube import Kube
from tests.integration.test_cluster_state import (  # the same cluster, namespace and topics
    Env,
    TopicLog,
    create,
    env,  # noqa: F401 (fixture)
    kube,  # noqa: F401 (fixture)
    read_log,
)
from tests.support.procs import Service, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

# Short but in client-go's proportions, so that a takeover takes seconds here.
LEASE_S, RENEW_S, RETRY_S = 4.0, 3.0, 0.5


def collector(e: Env, lease: str, identity: str, tmp_path: Path) -> Service:
    port = free_port()
    values = {
        "BOOTSTRAP": e.bootstrap,
        "KUBECONFIG": e.kubeconfig,
        "POLICIES_TOPIC": e.topics["policies"],
        "WORKLOADS_TOPIC": e.topics["workloads"],
        "CLUSTER_TOPIC": e.topics["cluster"],
        "METRICS_HOST": "127.0.0.1",
        "METRICS_PORT": str(port),
        "LEASE_NAME": lease,
        "LEASE_NAMESPACE": e.ns,
        "LEASE_DURATION_SECONDS": str(LEASE_S),
        "RENEW_DEADLINE_SECONDS": str(RENEW_S),
        "RETRY_PERIOD_SECONDS": str(RETRY_S),
        "IDENTITY": identity,
    }
    env_vars = {f"GOVERNOR_CLUSTER_COLLECTOR_{k}": v for k, v in values.items()}
    return Service("governor-cluster-collector", env_vars, port, tmp_path / f"{identity}.log")


def metric(text: str, name: str) -> float:
    """The sum of every sample of `name` in a /metrics page (0 if it has none)."""
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))


def published(s: Service) -> float:
    return metric(s.metrics(), "governor_collector_cluster_messages_total")


def leads(s: Service) -> bool:
    return metric(s.metrics(), "governor_collector_cluster_leader") == 1.0


async def wait_for(cond: Callable[[], Any], within_s: float, what: str) -> Any:
    deadline = time.monotonic() + within_s
    while True:
        got = await asyncio.to_thread(cond)
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within_s}s waiting for {what}")
        await asyncio.sleep(0.1)


async def add_workload(k: Kube, e: Env, name: str) -> str:
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }
    spec = {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template}
    await create(
        k, "apps/v1", "deployments", {"metadata": {"name": name}, "spec": spec}, namespace=e.ns
    )
    policy = e.policy(name, "Deployment", "apps/v1")
    await create(k, "governor.dev/v1alpha1", "scalingpolicies", policy, namespace=e.ns)
    return f"{e.ns}/Deployment/{name}"


def has(key: str, e: Env) -> Callable[[], bool]:
    def check() -> bool:
        log: TopicLog = asyncio.run(read_log(e.bootstrap, e.topics["workloads"]))
        return key in log.table

    return check


async def test_two_cluster_collectors_one_leader_publishes_and_a_kill_hands_over(
    env: Env,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    e = env
    lease = f"leader-{e.suffix}"
    a = collector(e, lease, "collector-a", tmp_path)
    b = collector(e, lease, "collector-b", tmp_path)
    services = [a, b]
    try:
        await asyncio.to_thread(a.start)
        await wait_for(lambda: leads(a), 30, "the first collector to lead by itself")
        await asyncio.to_thread(b.start)
        web = await add_workload(e.kube, e, "web")
        await wait_for(has(web, e), 30, "the leader's WorkloadState for web")
        # Exactly one publishes; the follower stays at zero while the leader lives.
        for _ in range(10):
            assert leads(a) and not leads(b)
            assert published(a) > 0 and published(b) == 0
            await asyncio.sleep(RETRY_S)
        holder = await e.kube.get("coordination.k8s.io/v1", "leases", lease, namespace=e.ns)
        assert holder["spec"]["holderIdentity"] == "collector-a"

        a.kill9()
        killed = time.monotonic()
        api = await add_workload(e.kube, e, "api")  # a change only the next leader can publish
        await wait_for(lambda: leads(b), LEASE_S + RENEW_S + 10, "the follower to take over")
        took_over = time.monotonic() - killed
        await wait_for(has(api, e), 30, "the new leader's WorkloadState for api")
        assert published(b) > 0
        after = await e.kube.get("coordination.k8s.io/v1", "leases", lease, namespace=e.ns)
        assert after["spec"]["holderIdentity"] == "collector-b"
        assert after["spec"]["leaseTransitions"] == holder["spec"]["leaseTransitions"] + 1
        print(f"cluster collector takeover after SIGKILL: {took_over:.1f}s (lease {LEASE_S}s)")
    finally:
        for s in services:
            s.stop()
