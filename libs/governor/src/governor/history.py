"""A topic's history, read from the beginning: what `governor explain` shows.

`History` reads every partition of its topics (no consumer group: all of them are its own) to
the end they had at start (`read_to_end`), then, if asked, goes on with what arrives
(`follow`). Nothing is committed, no effect on the services. Undecodable records are skipped
(the topic's own consumer dead-letters them).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from governor.bus import (
    DeadLetter,
    Decoder,
    Message,
    default_bootstrap,
    records_to_end,
    start_client,
)
from governor.events import Topic
from governor.kafka_security import KafkaSecurity, aiokafka_options


class History:
    def __init__(
        self,
        bootstrap: str | None,
        topics: Sequence[Topic[Any]],
        security: KafkaSecurity | None = None,
    ) -> None:
        self.bootstrap = bootstrap or default_bootstrap()
        # None: GOVERNOR_KAFKA_* (plaintext if unset), as the bus's clients; on the secure
        # broker `governor explain` reads as the principal `viewer`.
        self.security = security
        self.decoders = {t.name: Decoder(t, check_key=False) for t in topics}
        self._c: AIOKafkaConsumer | None = None

    async def __aenter__(self) -> History:
        def make() -> AIOKafkaConsumer:
            return AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                **aiokafka_options(self.security),
            )

        self._c = await start_client(make, "history reader", self.bootstrap, 30.0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._c is not None:
            await self._c.stop()
            self._c = None

    async def _partitions(self, timeout_s: float) -> set[TopicPartition]:
        """Subscribe to the topics that exist; without a group the consumer is given all of
        their partitions, reading from the beginning (auto_offset_reset=earliest)."""
        c = self._c
        assert c is not None
        names = sorted(set(self.decoders) & await c.topics())
        if not names:
            return set()
        c.subscribe(names)
        deadline = time.monotonic() + timeout_s
        while not c.assignment():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no partitions of {', '.join(names)} in {timeout_s:.0f}s")
            await asyncio.sleep(0.05)
        return set(c.assignment())

    def _decode(self, records: list[Any]) -> list[Message[Any]]:
        out: list[Message[Any]] = []
        for rec in records:
            with contextlib.suppress(DeadLetter):
                out.append(self.decoders[rec.topic](rec))
        return out

    async def read_to_end(self, timeout_s: float = 60.0) -> list[Message[Any]]:
        """Every record of the topics, up to the end offsets they had when called."""
        c = self._c
        assert c is not None, "use `async with History(...)`"
        tps = await self._partitions(timeout_s)
        if not tps:
            return []
        out: list[Message[Any]] = []
        async for records in records_to_end(c, tps, timeout_s, ", ".join(self.decoders)):
            out += self._decode(records)
        return out

    async def follow(self, poll_ms: int = 500) -> AsyncIterator[list[Message[Any]]]:
        """After `read_to_end`: each batch of new records, as they arrive (forever)."""
        c = self._c
        assert c is not None, "use `async with History(...)`"
        while True:
            batch: list[Message[Any]] = []
            for records in (await c.getmany(timeout_ms=poll_ms)).values():
                batch += self._decode(records)
            if batch:
                yield batch
