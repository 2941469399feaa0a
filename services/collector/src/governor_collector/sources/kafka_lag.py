"""`kafka_lag`: a consumer group's lag on a topic, with KEDA's Kafka-scaler semantics.

Each poll reads the topic's partitions (metadata), the group's committed offsets
(`list_consumer_group_offsets`, admin API) and the partitions' end offsets, then hands them to the
pure `governor.policy.kafka_lag.compute_lag` (caps, `limitToPartitionsWithLag`,
`excludePersistentLag`, activation). The previous committed offsets per partition, which
`excludePersistentLag` needs, are kept in the source instance between polls.

Two samples per poll, same timestamp:

* `<metric>`: the lag that drives scaling (unit `messages`) — KEDA's metric: persistent lag
  excluded if asked, capped at partitions × lagThreshold unless `allowIdleConsumers`. Labels
  (informational): `topic`, `consumer_group`, `lag_with_persistent` (uncapped, what activation
  looks at), `partitions_with_lag`, `active` (`"true"` when lag_with_persistent >
  activationLagThreshold, KEDA's activation).
* `<metric>.partitions`: the topic's partition count (unit `partitions`). The decider caps the
  workload's replicas at it — a consumer group cannot use more members than partitions. A
  separate sample (rather than a label) so it flows through the aggregator's windows like any
  metric and the decider reads it as the observation `<metric>.partitions`.

Errors: `topic_not_found`, `kafka` (the broker refused or is unreachable), `timeout`.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from governor.events import MetricSample
from governor.policy.kafka_lag import LagSettings, PartitionOffsets, compute_lag
from governor.spec import KafkaLagSource as KafkaLagSpec
from governor_collector.sources.base import (
    PullSource,
    SourceContext,
    SourceError,
    SourceTarget,
    register,
)

PARTITIONS_SUFFIX = ".partitions"
REQUEST_TIMEOUT_S = 10.0


class KafkaOffsets:
    """Reads committed and end offsets from one cluster (shared by every kafka_lag source on it)."""

    def __init__(self, bootstrap: str, client_id: str = "governor-collector-lag") -> None:
        self.bootstrap = bootstrap
        self._admin = AIOKafkaAdminClient(
            bootstrap_servers=bootstrap, client_id=client_id, request_timeout_ms=10_000
        )
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            group_id=None,
            enable_auto_commit=False,
            request_timeout_ms=10_000,
        )

    async def start(self) -> None:
        try:
            await self._admin.start()
            await self._consumer.start()
        except (KafkaError, OSError) as e:
            await self.close()
            raise SourceError("kafka", f"cannot reach {self.bootstrap}: {e}") from None

    async def close(self) -> None:
        for close in (self._consumer.stop, self._admin.close):
            with contextlib.suppress(Exception):  # best effort
                await close()

    async def offsets(self, topic: str, group: str) -> list[PartitionOffsets]:
        metas = await self._admin.describe_topics([topic])
        meta = next((m for m in metas if m.get("topic") == topic), None)
        if meta is None or meta.get("error_code", 0) != 0 or not meta.get("partitions"):
            code = None if meta is None else meta.get("error_code")
            raise SourceError(
                "topic_not_found", f"topic {topic!r} not found on {self.bootstrap} (code {code})"
            )
        tps = [TopicPartition(topic, p["partition"]) for p in meta["partitions"]]
        committed = await self._admin.list_consumer_group_offsets(group, partitions=tps)
        end = await self._consumer.end_offsets(tps)
        out = []
        for tp in sorted(tps, key=lambda t: t.partition):
            c = committed.get(tp)
            off = None if c is None or c.offset < 0 else c.offset
            out.append(PartitionOffsets(tp.partition, end[tp], off))
        return out


async def _open(bootstrap: str) -> KafkaOffsets:
    client = KafkaOffsets(bootstrap)
    await client.start()
    return client


async def _close(client: KafkaOffsets) -> None:
    await client.close()


def settings_of(spec: KafkaLagSpec) -> LagSettings:
    try:
        return LagSettings(
            lag_threshold=spec.lag_threshold,
            activation_lag_threshold=spec.activation_lag_threshold,
            offset_reset_policy=spec.offset_reset_policy,
            allow_idle_consumers=spec.allow_idle_consumers,
            exclude_persistent_lag=spec.exclude_persistent_lag,
            limit_to_partitions_with_lag=spec.limit_to_partitions_with_lag,
        )
    except ValueError as e:
        raise SourceError("bad_config", str(e)) from None


@register
class KafkaLagSource(PullSource[KafkaLagSpec]):
    name = "kafka_lag"
    config_type = KafkaLagSpec

    def __init__(self, target: SourceTarget, config: KafkaLagSpec, ctx: SourceContext) -> None:
        super().__init__(target, config, ctx)
        self._previous: dict[int, int] = {}

    async def collect(self, now: float) -> list[MetricSample]:
        cfg = self.config
        settings = settings_of(cfg)
        bootstrap = cfg.bootstrap_servers
        client = await self.ctx.shared(
            f"kafka_offsets:{bootstrap}", lambda: _open(bootstrap), _close
        )
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                offsets = await client.offsets(cfg.topic, cfg.consumer_group)
        except TimeoutError:
            raise SourceError(
                "timeout", f"offsets from {bootstrap} took > {REQUEST_TIMEOUT_S}s"
            ) from None
        except KafkaError as e:
            raise SourceError("kafka", f"{bootstrap}: {type(e).__name__}: {e}") from None
        report, self._previous = compute_lag(offsets, settings, self._previous)
        labels = {
            "topic": cfg.topic,
            "consumer_group": cfg.consumer_group,
            "lag_with_persistent": str(report.total_lag_with_persistent),
            "partitions_with_lag": str(report.partitions_with_lag),
            "active": "true" if report.active else "false",
        }
        return [
            self.sample(float(report.total_lag), now, unit="messages", labels=labels),
            self.sample(
                float(report.partitions),
                now,
                metric=self.target.metric + PARTITIONS_SUFFIX,
                unit="partitions",
                labels={"topic": cfg.topic},
            ),
        ]
