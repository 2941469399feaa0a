"""The `rabbitmq` source against a real RabbitMQ (Debian's rabbitmq-server with the management
plugin): queue length with and without unacknowledged messages, publish rate, regex over queues
(sum, max, avg), the vhost from the URL, an amqp:// host read as its management API, credentials
from the collector's environment, and the errors."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable

import pytest

from governor.spec import RabbitMQSource as RabbitSpec
from governor_collector.sources import SourceError
from tests.fixtures.rabbitmq import RabbitMQ
from tests.support.sources import collect_one, deployment_target
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

TARGET = deployment_target("shop", "worker", "m")


def qname() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


async def collect(spec: RabbitSpec) -> float:
    return (await collect_one(TARGET, spec, time.time())).value


async def collects(get: Callable[[], Awaitable[float]], want: float) -> None:
    """RabbitMQ publishes queue statistics every collect_statistics_interval (1 s here)."""

    async def check() -> None:
        got = await get()
        assert got == want, f"got {got}, want {want}"

    await eventually(check, within_s=20, interval=0.3)


def url(rmq: RabbitMQ, credentials: str = "guest:guest@", vhost: str = "") -> str:
    return f"http://{credentials}127.0.0.1:{rmq.management_port}/{vhost}"


async def test_queue_length_and_publish_rate(rabbitmq: RabbitMQ) -> None:
    q = qname()
    rabbitmq.declare(q)
    length = RabbitSpec(queue_name=q, host=url(rabbitmq))
    assert await collect(length) == 0
    rabbitmq.publish(q, 7)
    await collects(lambda: collect(length), 7)
    ready = RabbitSpec(queue_name=q, host=url(rabbitmq), exclude_unacknowledged=True)
    await collects(lambda: collect(ready), 7)
    rate = await collect(RabbitSpec(queue_name=q, host=url(rabbitmq), mode="MessageRate"))
    assert rate >= 0  # messages/s over RabbitMQ's last sample interval


async def test_regex_over_queues_combines_by_operation(rabbitmq: RabbitMQ) -> None:
    tag = uuid.uuid4().hex[:6]
    for name, n in ((f"{tag}-a-incoming", 2), (f"{tag}-b-incoming", 4), (f"{tag}-c-other", 9)):
        rabbitmq.declare(name)
        rabbitmq.publish(name, n)
    pattern = f"^{tag}-.*-incoming$"
    for op, want in (("sum", 6), ("max", 4), ("avg", 3)):
        spec = RabbitSpec(queue_name=pattern, host=url(rabbitmq), use_regex=True, operation=op)  # type: ignore[arg-type]
        await collects(lambda spec=spec: collect(spec), want)
    with pytest.raises(SourceError) as err:
        await collect(RabbitSpec(queue_name=f"^{tag}-none$", host=url(rabbitmq), use_regex=True))
    assert err.value.reason == "no_queue_matches"


async def test_vhost_amqp_host_and_credentials_from_env(
    rabbitmq: RabbitMQ, monkeypatch: pytest.MonkeyPatch
) -> None:
    vhost = f"v-{uuid.uuid4().hex[:6]}"
    rabbitmq.api("PUT", f"/api/vhosts/{vhost}")
    rabbitmq.api(
        "PUT", f"/api/permissions/{vhost}/guest", {"configure": ".*", "write": ".*", "read": ".*"}
    )
    q = qname()
    rabbitmq.declare(q, vhost)
    rabbitmq.publish(q, 3, vhost)
    await collects(lambda: collect(RabbitSpec(queue_name=q, host=url(rabbitmq, vhost=vhost))), 3)
    # KEDA's amqp:// host: governor asks the management API of the same host (port 15672 there;
    # here the test node's management port is given through the env var holding the host).
    monkeypatch.setenv("GOVERNOR_TEST_RMQ_HOST", url(rabbitmq, "", vhost))
    monkeypatch.setenv("GOVERNOR_TEST_RMQ_USER", "guest")
    monkeypatch.setenv("GOVERNOR_TEST_RMQ_PASSWORD", "guest")
    from_env = RabbitSpec(
        queue_name=q,
        host_from_env="GOVERNOR_TEST_RMQ_HOST",
        username_from_env="GOVERNOR_TEST_RMQ_USER",
        password_from_env="GOVERNOR_TEST_RMQ_PASSWORD",
    )
    assert await collect(from_env) == 3
    monkeypatch.setenv("GOVERNOR_TEST_RMQ_PASSWORD", "wrong")
    with pytest.raises(SourceError) as err:
        await collect(from_env)
    assert err.value.reason == "http_status"  # 401, said with the URL


async def test_missing_queue_and_unreachable_server(rabbitmq: RabbitMQ) -> None:
    with pytest.raises(SourceError) as err:
        await collect(RabbitSpec(queue_name=qname(), host=url(rabbitmq)))
    assert err.value.reason == "queue_not_found"
    with pytest.raises(SourceError) as err:
        await collect(RabbitSpec(queue_name="q", host="http://guest:guest@127.0.0.1:1/"))
    assert err.value.reason == "unreachable"
