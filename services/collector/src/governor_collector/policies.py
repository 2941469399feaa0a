"""The policies table: `governor.policies` (compacted) read from the beginning and followed.

Every collector reads the whole topic (no consumer group, nothing committed): the latest record
per key is the policy, a tombstone (null value) deletes it. `loaded` turns true once the reader
reached the end offsets the topic had when it started; only then is `on_change` called with the
whole table, and after that on every batch that changed it — so a replay of the topic's history
never starts sources for superseded versions of a policy.

An undecodable record is skipped with a warning and counted
(`governor_collector_policy_errors_total{reason="undecodable"}`): the policies topic's own
consumers dead-letter it; a table reader must not (every replica would, on every start).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from tenacity import RetryError

from governor import retry
from governor.bus import codec_for, topic_partitions
from governor.events import POLICIES, PolicyRecord, Topic
from governor.kafka_security import KafkaSecurity, aiokafka_options
from governor.spec import ScalingPolicy
from governor_collector import metrics

log = logging.getLogger("governor_collector.policies")

OnChange = Callable[[dict[str, ScalingPolicy]], Awaitable[Any]]


def apply_record(
    table: dict[str, ScalingPolicy], key: str | None, value: PolicyRecord | None
) -> bool:
    """Apply one record to the table; True if it changed it."""
    if key is None:
        return False
    if value is None:
        return table.pop(key, None) is not None
    old = table.get(key)
    table[key] = value.policy
    return old != value.policy


class PolicyTable:
    def __init__(
        self,
        bootstrap: str,
        on_change: OnChange,
        *,
        topic: Topic[PolicyRecord] = POLICIES,
        client_id: str = "governor-collector-policies",
        start_timeout_s: float = 60.0,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.topic = topic
        self.on_change = on_change
        self.client_id = client_id
        self.start_timeout_s = start_timeout_s
        self.table: dict[str, ScalingPolicy] = {}
        self.loaded = False
        self._codec = codec_for(topic)
        self._consumer: AIOKafkaConsumer | None = None
        self._end: dict[TopicPartition, int] = {}
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect and assign every partition from the beginning (retries until the timeout)."""
        try:
            c: AIOKafkaConsumer = await retry.retrying(
                on=(KafkaError, OSError),
                first_s=0.2,
                max_s=5.0,
                deadline=time.monotonic() + self.start_timeout_s,
                log=log,
                what=f"policies: reading {self.topic.name}",
            )(self._open)
        except RetryError as e:
            err = e.last_attempt.exception()
            raise ConnectionError(
                f"policies: cannot read {self.topic.name} from {self.bootstrap}: {err}"
            ) from err
        self._consumer = c
        self._task = asyncio.create_task(self._run(), name="policies table")

    async def _open(self) -> AIOKafkaConsumer:
        """One attempt: a started consumer assigned every partition, at the beginning."""
        c = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            **aiokafka_options(self.security),
            client_id=self.client_id,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        try:
            await c.start()
            parts = await topic_partitions(c, self.topic.name, self.bootstrap, self.security)
            if not parts:
                raise KafkaError(f"topic {self.topic.name} has no partitions")
            tps = [TopicPartition(self.topic.name, p) for p in sorted(parts)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            self._end = await c.end_offsets(tps)
        except (KafkaError, OSError):
            with contextlib.suppress(Exception):
                await c.stop()
            raise
        return c

    async def _check_loaded(self) -> None:
        c = self._consumer
        assert c is not None
        for tp, end in self._end.items():
            if await c.position(tp) < end:
                return
        self.loaded = True
        metrics.POLICIES.set(len(self.table))
        log.info("policies table loaded: %d policies", len(self.table))
        await self._notify()

    async def _notify(self) -> None:
        try:
            await self.on_change(dict(self.table))
        except Exception:
            log.exception("applying the policies failed")

    def _decode(self, rec: Any) -> tuple[str | None, PolicyRecord | None, bool]:
        try:
            key = None if rec.key is None else rec.key.decode()
            value = None if rec.value is None else self._codec.decode(rec.value)
        except (UnicodeDecodeError, msgspec.DecodeError) as e:
            metrics.POLICY_ERRORS.labels("undecodable").inc()
            log.warning("policies: skipping %s[%d]@%d: %s", rec.topic, rec.partition, rec.offset, e)
            return None, None, False
        return key, value, True

    async def _run(self) -> None:
        c = self._consumer
        assert c is not None
        try:
            if not self.loaded:
                await self._check_loaded()
            while not self._stopping:
                try:
                    batches = await c.getmany(timeout_ms=500)
                except KafkaError as e:
                    log.warning("policies: fetch failed: %s", e)
                    await asyncio.sleep(1.0)
                    continue
                changed = False
                for records in batches.values():
                    for rec in records:
                        key, value, ok = self._decode(rec)
                        if ok and apply_record(self.table, key, value):
                            changed = True
                            log.info(
                                "policy %s %s",
                                key,
                                "deleted" if value is None else "updated",
                                extra={"policy": key},
                            )
                metrics.POLICIES.set(len(self.table))
                if not self.loaded:
                    await self._check_loaded()
                elif changed:
                    await self._notify()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("policies reader stopped")
            raise

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 5.0)
            except (TimeoutError, Exception):
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._task
            self._task = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
