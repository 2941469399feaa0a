"""The decoder fuzz (tests/unit/test_bus_decoder_fuzz.py) through a real consumer on the real
broker: for every consumed topic type, fuzzed records (random bytes, truncated and bit-flipped valid
messages, wrong types, missing keys, unknown schema versions, bad keys, tombstones) are
produced raw; the consumer keeps running, hands on exactly the records that decode, and sends
every other one to `<topic>.dlq` with the reason the decoder gives, the original bytes untouched.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from governor.bus import H_DLQ_OFFSET, H_DLQ_REASON, Consumer, DeadLetter, Decoder, Producer
from governor.events import Topic
from governor.topics import ensure_topics
from tests.integration.test_bus import consume_until, read_raw, renamed
from tests.unit.test_bus_decoder_fuzz import CONSUMED, records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PER_TOPIC = 40


def fuzzed(topic: Topic[Any], n: int) -> list[SimpleNamespace]:
    out: list[SimpleNamespace] = []

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(rec=records(topic))
    def collect(rec: SimpleNamespace) -> None:
        out.append(rec)

    collect()
    return out[:n]


def expected(topic: Topic[Any], rec: SimpleNamespace) -> str | None:
    """The decoder's verdict on `rec`: None (decodes) or the dead-letter reason."""
    try:
        Decoder(topic)(rec)
    except DeadLetter as e:
        return e.reason
    return None


async def test_fuzzed_records_on_every_consumed_topic(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    topics = [renamed(t, f"test.fuzz.{unique_suffix}", partitions=1) for t in CONSUMED]
    await ensure_topics(kafka_bootstrap, topics)
    plan: dict[str, list[str | None]] = {}
    async with Producer(kafka_bootstrap) as p:
        for original, t in zip(CONSUMED, topics, strict=True):
            # what cannot be produced is left out: neither key nor value (clients refuse it),
            # no key on a compacted topic (the broker refuses it)
            recs = [
                r
                for r in fuzzed(original, PER_TOPIC)
                if (r.key or r.value is not None) and (r.key is not None or not t.compacted)
            ]
            plan[t.name] = [expected(original, r) for r in recs]
            acks = [
                await p.send_raw(t.name, r.value, key=r.key, headers=list(r.headers or ()))
                for r in recs
            ]
            await p.wait(acks)
    good_total = sum(v.count(None) for v in plan.values())
    c = Consumer(kafka_bootstrap, topics, group_id=f"fuzz-{unique_suffix}")
    await c.start()
    try:
        # raises what the consumer's loop raised: a crash fails here
        got = await consume_until(c, lambda g: len(g) >= good_total, within_s=60)
    finally:
        await c.stop()
    reasons: Counter[str] = Counter()
    for t in topics:
        want = plan[t.name]
        handed = [m.offset for m in got if m.topic == t.name]
        assert handed == [i for i, r in enumerate(want) if r is None], t.name
        bad = {i: r for i, r in enumerate(want) if r is not None}
        dlq = await read_raw(kafka_bootstrap, t.dlq, len(bad))
        assert len(dlq) == len(bad), t.name
        for rec in dlq:
            h = dict(rec.headers)
            assert h[H_DLQ_REASON].decode() == bad[int(h[H_DLQ_OFFSET])], (t.name, h)
            reasons[h[H_DLQ_REASON].decode()] += 1
    total = sum(len(v) for v in plan.values())
    print(
        f"DLQ fuzz: {total} records on {len(topics)} topics, {good_total} handled, "
        f"{total - good_total} dead-lettered {dict(reasons)}, 0 consumer crashes"
    )
    assert total - good_total > 0 and good_total > 0
