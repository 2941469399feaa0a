"""Reading topics to the end they have now, without a consumer group: compacted tables
(`read_table`) and any topic's history (`governor.history`)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition

from governor.bus.codec import DeadLetter, Decoder
from governor.bus.connect import default_bootstrap, start_client, topic_partitions
from governor.events import Topic
from governor.kafka_security import KafkaSecurity, aiokafka_options

log = logging.getLogger("governor.bus")

T = TypeVar("T", bound=msgspec.Struct)


async def records_to_end(
    c: AIOKafkaConsumer, tps: Iterable[TopicPartition], timeout_s: float, what: str
) -> AsyncIterator[list[Any]]:
    """Each fetched batch of raw records of `tps` (one partition's, in offset order) below the
    end offsets those partitions had when called; `c` has them assigned at the start (or at
    the offsets to read from). `TimeoutError` after `timeout_s`, naming `what`."""
    tps = list(tps)
    end = await c.end_offsets(tps)
    pending = {tp for tp in tps if end[tp] > 0}
    deadline = time.monotonic() + timeout_s
    while pending:
        for tp in list(pending):
            if await c.position(tp) >= end[tp]:
                pending.discard(tp)
        if not pending:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {what} to its end took more than {timeout_s:.0f}s")
        for tp, records in (await c.getmany(*pending, timeout_ms=500)).items():
            yield [r for r in records if r.offset < end[tp]]


async def read_table(
    bootstrap: str | None,
    topic: Topic[T],
    *,
    timeout_s: float = 30.0,
    start_timeout_s: float = 30.0,
    security: KafkaSecurity | None = None,
) -> dict[str, T]:
    """Read a compacted topic from the beginning to its current end: the latest value per key,
    with tombstones applied (deleted keys are absent). The same answer whether or not the broker
    has compacted yet. Undecodable records are skipped with a warning (the topic's group consumer
    dead-letters them)."""
    bootstrap = bootstrap or default_bootstrap()
    dec = Decoder(topic)

    def make() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            **aiokafka_options(security),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )

    c = await start_client(make, "table reader", bootstrap, start_timeout_s)
    try:
        parts = await topic_partitions(c, topic.name, bootstrap, security)
        tps = [TopicPartition(topic.name, p) for p in sorted(parts)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        table: dict[str, T] = {}
        async for records in records_to_end(c, tps, timeout_s, topic.name):
            for rec in records:
                try:
                    msg = dec(rec)
                except DeadLetter as dl:
                    log.warning(
                        "table %s: skipping %s[%d]@%d (%s: %s)",
                        topic.name,
                        rec.topic,
                        rec.partition,
                        rec.offset,
                        dl.reason,
                        dl.detail[:200],
                    )
                    continue
                if msg.key is None:
                    continue
                if msg.value is None:
                    table.pop(msg.key, None)
                else:
                    table[msg.key] = msg.value
        return table
    finally:
        await c.stop()
