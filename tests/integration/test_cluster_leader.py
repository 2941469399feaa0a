"""Two cluster collectors on the real API server and broker, electing a leader on a real
coordination.k8s.io/v1 Lease: exactly one publishes; SIGKILL of the leader hands over within a
lease duration and a renew deadline; never do both publish; SIGTERM releases the Lease."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import yaml

from governor.kube import Kube
from governor_tools.toxiproxy import Toxiproxy
from tests.integration.test_cluster_state import (  # the same cluster, namespace and topics
    Env,
    TopicLog,
    create,
    env,  # noqa: F401 (fixture)
    kube,  # noqa: F401 (fixture)
    read_log,
)
from tests.support.procs import Service, free_port
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

# Short but in client-go's proportions, so that a takeover takes seconds here.
LEASE_S, RENEW_S, RETRY_S = 4.0, 3.0, 0.5


def collector(
    e: Env, lease: str, identity: str, tmp_path: Path, kubeconfig: str | None = None
) -> Service:
    port = free_port()
    values = {
        "BOOTSTRAP": e.bootstrap,
        "KUBECONFIG": kubeconfig or e.kubeconfig,
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


def leading(s: Service) -> Callable[[], Awaitable[bool]]:
    """`leads(s)` for `wait_for`, in a thread (the scrape blocks)."""
    return lambda: asyncio.to_thread(leads, s)


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


def has(key: str, e: Env) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        log: TopicLog = await read_log(e.bootstrap, e.topics["workloads"])
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
        await wait_for(leading(a), 30, "the first collector to lead by itself")
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
        await wait_for(leading(b), LEASE_S + RENEW_S + 10, "the follower to take over")
        took_over = time.monotonic() - killed
        await wait_for(has(api, e), 30, "the new leader's WorkloadState for api")
        assert published(b) > 0
        after = await e.kube.get("coordination.k8s.io/v1", "leases", lease, namespace=e.ns)
        assert after["spec"]["holderIdentity"] == "collector-b"
        assert after["spec"]["leaseTransitions"] == holder["spec"]["leaseTransitions"] + 1
        print(f"cluster collector takeover after SIGKILL: {took_over:.1f}s (lease {LEASE_S}s)")

        # A graceful stop (SIGTERM) releases the Lease on the way out: no wait for expiry.
        c = collector(e, lease, "collector-c", tmp_path)
        services.append(c)
        await asyncio.to_thread(c.start)
        assert leads(b) and not leads(c)
        await asyncio.to_thread(b.stop)
        released = await e.kube.get("coordination.k8s.io/v1", "leases", lease, namespace=e.ns)
        assert released["spec"]["holderIdentity"] in ("", "collector-c")
        await wait_for(
            leading(c),
            30,
            "the third collector to take the released Lease",
        )
    finally:
        for s in services:
            s.stop()


def proxied_kubeconfig(e: Env, listen: str, tmp_path: Path) -> tuple[str, str]:
    """A copy of the admin kubeconfig whose server is `listen`; returns (path, upstream)."""
    doc = yaml.safe_load(Path(e.kubeconfig).read_text())
    cluster = doc["clusters"][0]["cluster"]
    upstream = cluster["server"].removeprefix("https://")
    cluster["server"] = f"https://{listen}"  # the serving cert names 127.0.0.1, not a port
    path = tmp_path / "proxied.kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return str(path), upstream


class Sampler:
    """Both collectors' leader gauges, read over and over in a thread."""

    def __init__(self, a: Service, b: Service) -> None:
        self.a, self.b = a, b
        self.samples: list[tuple[bool, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((leads(self.a), leads(self.b)))
            time.sleep(0.05)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


async def test_a_leader_partitioned_from_the_api_server_steps_down_before_the_other_leads(
    env: Env,  # noqa: F811 (the fixture imported above)
    toxiproxy: Toxiproxy,
    tmp_path: Path,
) -> None:
    e = env
    lease = f"partition-{e.suffix}"
    listen = f"127.0.0.1:{free_port()}"
    kubeconfig, upstream = proxied_kubeconfig(e, listen, tmp_path)
    proxy = f"kube-{e.suffix}"
    await toxiproxy.create(proxy, listen=listen, upstream=upstream)
    a = collector(e, lease, "collector-a", tmp_path, kubeconfig)  # behind the proxy
    b = collector(e, lease, "collector-b", tmp_path)
    try:
        await asyncio.to_thread(a.start)
        await wait_for(leading(a), 30, "the proxied collector to lead")
        await asyncio.to_thread(b.start)
        before = published(a)
        with Sampler(a, b) as sampled:
            await toxiproxy.partition(proxy)
            await wait_for(
                leading(b),
                LEASE_S + RENEW_S + 15,
                "the other to take over",
            )
            await toxiproxy.heal(proxy)
            await asyncio.sleep(4 * RETRY_S)  # the healed one reads the Lease: b holds it
        assert leads(b) and not leads(a)
        both = [i for i, (x, y) in enumerate(sampled.samples) if x and y]
        assert not both, f"both led at samples {both[:5]} of {len(sampled.samples)}"
        assert any(not x and not y for x, y in sampled.samples), "no gap between the two leaders"
        api = await add_workload(e.kube, e, "api")
        await wait_for(has(api, e), 30, "the new leader's WorkloadState for api")
        assert published(a) == before, "the partitioned collector published after it lost"
    finally:
        a.stop()
        b.stop()
