"""From KEDA to governor.metrics: a ScaledObject as KEDA's docs write it (a Secret, a
TriggerAuthentication and the ScaledObject in one file) goes through `governor import`, the
policy goes to the collector's policies topic, and the collector publishes the real Redis list's
length to the metrics topic under the imported metric's name — credentials from the env var the
import named."""

from __future__ import annotations

import uuid

import pytest

from governor.bus import Producer
from governor.events import PolicyRecord
from governor.importer import convert_documents
from tests.fixtures.redis import RedisServer
from tests.integration.test_collector import TopicReader, running_collector
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

PASSWORD = "s3cret"


def keda_file(address: str, list_name: str) -> list[dict]:
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "votes-db-secret"}},
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "TriggerAuthentication",
            "metadata": {"name": "keda-trigger-auth-redis-secret"},
            "spec": {
                "secretTargetRef": [
                    {"parameter": "password", "name": "votes-db-secret", "key": "redis_password"}
                ]
            },
        },
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": "redis-scaledobject", "namespace": "itest"},
            "spec": {
                "scaleTargetRef": {"name": "votes"},
                "pollingInterval": 1,
                "minReplicaCount": 1,
                "triggers": [
                    {
                        "type": "redis",
                        "metadata": {"address": address, "listName": list_name, "listLength": "10"},
                        "authenticationRef": {"name": "keda-trigger-auth-redis-secret"},
                    }
                ],
            },
        },
    ]


async def test_imported_redis_policy_is_collected(
    kafka_bootstrap: str, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_name = f"votes-{uuid.uuid4().hex[:6]}"
    outcomes = convert_documents(keda_file(redis_server.address, list_name))
    (conv,) = [o.conversion for o in outcomes if o.conversion]
    (metric,) = conv.policy.spec.metrics
    assert metric.name == f"redis{{list={list_name}}}"
    env = metric.source.password_from_env  # type: ignore[union-attr]
    assert env == "KEDA_TRIGGER_AUTH_REDIS_SECRET_PASSWORD"
    monkeypatch.setenv(env, PASSWORD)
    redis_server.command("CONFIG", "SET", "requirepass", PASSWORD)
    try:
        async with (
            running_collector(kafka_bootstrap) as c,
            TopicReader(kafka_bootstrap, c.settings.metrics_topic) as reader,
        ):
            producer = Producer(kafka_bootstrap)
            await producer.start()
            try:
                _, policies_topic = c.settings.topics()
                await producer.send(policies_topic, PolicyRecord(conv.policy))
            finally:
                await producer.stop()
            await wait_for(lambda: any(s.value == 0 for s in reader.samples), what="length 0")
            redis_server.command("RPUSH", list_name, "a", "b", "c", "d", password=PASSWORD)
            await wait_for(lambda: any(s.value == 4 for s in reader.samples), what="length 4")
            s = reader.samples[-1]
            assert (s.workload, s.metric, s.source) == (
                "itest/Deployment/votes",
                metric.name,
                "redis",
            )
    finally:
        redis_server.command("CONFIG", "SET", "requirepass", "", password=PASSWORD)
