"""Network faults through a real Toxiproxy (tests/fixtures/toxiproxy.py): 2 s of latency, then a
partition, then the heal, between a governor bus client and the broker (the broker's listener
advertised at the proxy, so reconnections stay behind it) and between `governor.kube.Kube` and
the dev kube-apiserver. What must hold: nothing acknowledged is lost, and the clients work again
after the heal without being restarted."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient
from tenacity import RetryError

from governor import events
from governor.bus import Consumer, Message, Producer
from governor.kube import Kube, KubeError
from governor.retry import retrying
from governor.topics import ensure_topics
from governor_tools.toxiproxy import Toxiproxy
from tests.fixtures.kube import load_configuration, unique_name
from tests.fixtures.toxiproxy import ProxiedKafka
from tests.support.procs import free_port
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

log = logging.getLogger(__name__)

LATENCY_MS = 2000
LATENCY_S = 6.0  # long enough for a few round trips at 2 s each way
BUS_PARTITION_S = 20.0  # issue #21's partition
KUBE_PARTITION_S = 10.0


@dataclasses.dataclass
class Stream:
    """Actuations published at a steady pace; when each was acknowledged and consumed."""

    acked: dict[str, float] = dataclasses.field(default_factory=dict)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    seen: dict[str, float] = dataclasses.field(default_factory=dict)
    sent: int = 0

    async def settle(self, fut: asyncio.Future[Any], did: str) -> None:
        try:
            await fut
            self.acked[did] = time.monotonic()
        except Exception as e:  # not acknowledged: may be lost, never counted as delivered
            self.failed[did] = type(e).__name__

    async def handle(self, m: Message[Any]) -> None:
        self.seen.setdefault(m.value.decision_id, time.monotonic())

    def between(self, times: dict[str, float], start: float, end: float) -> int:
        return sum(1 for t in times.values() if start <= t <= end)


async def publish(
    producer: Producer, topic: events.Topic[Any], s: Stream, stop: asyncio.Event
) -> None:
    pending: list[asyncio.Task[None]] = []
    while not stop.is_set():
        i = s.sent
        a = events.Actuation(
            decision_id=f"d{i}", workload=f"ns/Deployment/w{i % 7}", seq=i,
            outcome="applied", reason="test",
        )  # fmt: skip
        fut = await producer.publish(topic, a)
        pending.append(asyncio.create_task(s.settle(fut, a.decision_id)))
        s.sent += 1
        await asyncio.sleep(0.02)
    await asyncio.gather(*pending)


async def test_bus_clients_behind_a_partitioned_proxy_reconnect_and_lose_nothing_acked(
    proxied_kafka: ProxiedKafka, toxiproxy: Toxiproxy, unique_suffix: str
) -> None:
    pk = proxied_kafka
    await pk.connect(toxiproxy)
    topic = dataclasses.replace(
        events.ACTUATIONS, name=f"test.toxiproxy.{unique_suffix}", partitions=3
    )
    await ensure_topics(pk.direct, [topic])
    s = Stream()
    # Both clients only know the proxy: its metadata answers name the proxy's address too.
    consumer = Consumer(pk.proxied, [topic], group_id=f"toxiproxy-{unique_suffix}")
    producer = Producer(pk.proxied, request_timeout_ms=10_000)
    await consumer.start()
    await producer.start()
    run = asyncio.create_task(consumer.run(s.handle))
    stop = asyncio.Event()
    publishing = asyncio.create_task(publish(producer, topic, s, stop))
    try:
        await wait_for(lambda: len(s.seen) >= 20, 60, "the stream flowing through the proxy")
        await toxiproxy.latency(pk.proxy, ms=LATENCY_MS)
        await asyncio.sleep(LATENCY_S)
        await toxiproxy.heal(pk.proxy)
        await toxiproxy.partition(pk.proxy)
        cut = time.monotonic()
        await asyncio.sleep(BUS_PARTITION_S)
        healed = time.monotonic()
        await toxiproxy.heal(pk.proxy)
        await wait_for(
            lambda: s.between(s.seen, healed, float("inf")) >= 20, 90, "consumption after the heal"
        )
        stop.set()
        await publishing
        await wait_for(lambda: s.acked.keys() <= s.seen.keys(), 60, "every acked message consumed")
    finally:
        stop.set()
        await publishing
        await producer.stop()
        await consumer.stop()
        await run
    # The partition was real: nothing got through it (a second's grace for what was in flight).
    assert s.between(s.acked, cut + 1, healed) == 0
    assert s.between(s.seen, cut + 1, healed) == 0
    missing = s.acked.keys() - s.seen.keys()
    assert not missing, f"{len(missing)} acknowledged messages lost"
    after = [d for d, t in s.acked.items() if t > healed]
    assert after, "the producer did not recover after the heal"
    print(
        f"toxiproxy bus: {s.sent} sent, {len(s.acked)} acked, {len(s.failed)} failed "
        f"({sorted(set(s.failed.values()))}), {len(s.seen)} consumed, "
        f"{len(after)} acked after the heal"
    )


# --- the kube-apiserver behind a proxy ------------------------------------------------------------


async def test_kube_client_behind_a_proxy_survives_latency_and_a_partition(
    kubeconfig_path: Path, toxiproxy: Toxiproxy, unique_namespace: str
) -> None:
    cfg = await load_configuration(kubeconfig_path)
    upstream = cfg.host.removeprefix("https://")
    port = free_port()
    name = f"kube-{port}"
    await toxiproxy.create(name, listen=f"127.0.0.1:{port}", upstream=upstream)
    cfg.host = f"https://127.0.0.1:{port}"  # the serving cert names 127.0.0.1, not a port
    ns = unique_namespace
    async with ApiClient(configuration=cfg) as api:
        kube = Kube(api, timeout_s=5.0)
        await kube.get("v1", "namespaces", ns)

        # 2 s each way: slow, but inside the client's timeout, so every call still succeeds.
        await toxiproxy.latency(name, ms=LATENCY_MS)
        t0 = time.monotonic()
        await kube.get("v1", "namespaces", ns)
        slowed = time.monotonic() - t0
        await toxiproxy.heal(name)
        assert slowed >= LATENCY_MS / 1000, f"the latency toxic did not apply ({slowed:.2f}s)"

        # Partitioned: a call fails by its own timeout as a retryable KubeError (status 0) ...
        await toxiproxy.partition(name)
        with pytest.raises(KubeError) as err:
            await kube.get("v1", "namespaces", ns)
        assert err.value.status == 0 and err.value.retryable
        # ... a retry loop with a deadline gives up at its deadline, having backed off ...
        attempts = 0

        async def get_namespace() -> dict[str, Any]:
            nonlocal attempts
            attempts += 1
            return await kube.get("v1", "namespaces", ns)

        with pytest.raises(RetryError):
            await retrying(
                on=KubeError, first_s=0.2, max_s=1.0, log=log, what="get",
                deadline=time.monotonic() + 3.0,
            )(get_namespace)  # fmt: skip
        assert attempts >= 1

        # ... and one without a deadline, started during the partition, succeeds after the heal.
        cm = unique_name("cm")
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm}, "data": {}}

        async def create() -> dict[str, Any]:
            try:
                return await kube.create("v1", "configmaps", body, namespace=ns)
            except KubeError as e:
                if e.status == 409:  # a lost answer to a create the server did make
                    return await kube.get("v1", "configmaps", cm, namespace=ns)
                raise

        creating = asyncio.create_task(
            retrying(on=KubeError, first_s=0.2, max_s=2.0, log=log, what="create")(create)
        )
        await asyncio.sleep(KUBE_PARTITION_S)
        assert not creating.done(), "a call went through the partition"
        await toxiproxy.heal(name)
        created = await asyncio.wait_for(creating, 60)
        assert created["metadata"]["name"] == cm
        got = await kube.get("v1", "configmaps", cm, namespace=ns)
        assert got["metadata"]["uid"] == created["metadata"]["uid"]
