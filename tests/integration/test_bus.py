"""governor.bus and governor.topics on a real Kafka broker (tests/fixtures/kafka.py)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client import REGISTRY

from governor import events
from governor.bus import (
    H_DLQ_OFFSET,
    H_DLQ_PARTITION,
    H_DLQ_REASON,
    H_DLQ_TOPIC,
    BusUnavailable,
    Consumer,
    Message,
    Producer,
    codec_for,
    read_table,
    topic_partitions,
)
from governor.bus.connect import probe_brokers, probe_partition
from governor.topics import describe_topics, ensure_topics
from tests.fixtures.kafka import KafkaBroker
from tests.support.waiting import wait_for
from tests.unit.test_events import examples

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

JSON = [("content-type", b"application/json"), ("schema-version", b"1")]


def renamed(topic: events.Topic[Any], prefix: str, **changes: Any) -> events.Topic[Any]:
    return dataclasses.replace(topic, name=f"{prefix}.{topic.name}", **changes)


@contextlib.asynccontextmanager
async def from_start(
    bootstrap: str, name: str, partitions: int = 1
) -> AsyncIterator[tuple[AIOKafkaConsumer, list[TopicPartition]]]:
    """A raw consumer of no group on the first `partitions` partitions of `name`, at their
    beginning."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await c.start()
    try:
        tps = [TopicPartition(name, i) for i in range(partitions)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        yield c, tps
    finally:
        await c.stop()


async def read_raw(bootstrap: str, name: str, n: int, within_s: float = 30) -> list[Any]:
    """The first n records of partition 0 of `name`, raw."""
    async with from_start(bootstrap, name) as (c, (tp,)):
        out: list[Any] = []
        deadline = time.monotonic() + within_s
        while len(out) < n and time.monotonic() < deadline:
            for records in (await c.getmany(tp, timeout_ms=500)).values():
                out += records
        return out


async def read_all_raw(bootstrap: str, name: str) -> list[Any]:
    """Every record of partition 0 of `name` up to its current end."""
    async with from_start(bootstrap, name) as (c, (tp,)):
        end = (await c.end_offsets([tp]))[tp]
        out: list[Any] = []
        while await c.position(tp) < end:
            for records in (await c.getmany(tp, timeout_ms=500)).values():
                out += records
        return out


async def consume_until(
    consumer: Consumer,
    done: Callable[[list[Message[Any]]], bool],
    within_s: float = 30,
    handler: Callable[[Message[Any]], Awaitable[None]] | None = None,
) -> list[Message[Any]]:
    got: list[Message[Any]] = []

    async def collect(m: Message[Any]) -> None:
        if handler is not None:
            await handler(m)
        got.append(m)

    task = asyncio.create_task(consumer.run(collect))
    try:
        await wait_for(lambda: done(got) or task.done(), within_s, "messages")
        if task.done():
            task.result()
    finally:
        consumer.request_stop()
        await task
    return got


def dead_letters(topic: str, reason: str) -> float:
    v = REGISTRY.get_sample_value(
        "governor_bus_dead_letters_total", {"topic": topic, "reason": reason}
    )
    return v or 0.0


# --- every event type ---------------------------------------------------------------------------


async def test_every_event_type_round_trips(kafka_bootstrap: str, unique_suffix: str) -> None:
    ex = examples()
    assert set(ex) == {t.name for t in events.TOPICS}, "a topic without an example"
    prefix = f"test.rt.{unique_suffix}"
    topics = [renamed(t, prefix, partitions=2 if t.partitions > 1 else 1) for t in events.TOPICS]
    await ensure_topics(kafka_bootstrap, topics)
    sent: dict[str, Any] = {}
    async with Producer(kafka_bootstrap) as p:
        for orig, t in zip(events.TOPICS, topics, strict=True):
            value = ex[orig.name]
            await p.send(t, value)
            sent[t.name] = value

    async with Consumer(kafka_bootstrap, topics, group_id=f"rt-{unique_suffix}") as c:
        got = await consume_until(c, lambda g: len(g) >= len(topics))
    assert len(got) == len(topics)
    for m in got:
        t = next(t for t in topics if t.name == m.topic)
        assert m.value == sent[m.topic], m.topic
        assert type(m.value) is t.type
        assert m.key == t.key(sent[m.topic])

    # the wire: JSON with content-type and schema-version headers, readable without governor
    raw = (await read_raw(kafka_bootstrap, topics[0].name, 1))[0]
    assert dict(raw.headers) == dict(JSON)
    assert msgspec.json.decode(raw.value)["workload"] == ex[events.METRICS.name].workload


# --- dead letters -------------------------------------------------------------------------------


async def test_bad_messages_go_to_the_dlq_and_the_good_ones_are_processed(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    t = renamed(events.METRICS, f"test.dlq.{unique_suffix}", partitions=1)
    await ensure_topics(kafka_bootstrap, [t])
    good = [
        events.MetricSample(workload=f"ns/Deployment/w{i}", metric="rps", value=i, timestamp=i)
        for i in range(8)
    ]
    codec = codec_for(t)
    bad: list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]] = [
        ("decode", b"\x00\xff not json {", b"ns/Deployment/x", JSON),
        ("validation", b'{"workload": 1, "metric": "rps"}', b"ns/Deployment/x", JSON),
        (
            "validation",
            b'{"workload": "a/b/c", "metric": "rps", "value": "high", "timestamp": 1}',
            b"a/b/c",
            [],
        ),
        ("key", codec.encode(good[0]), b"some/other/key", JSON),
        ("tombstone", None, b"ns/Deployment/w0", JSON),
        (
            "schema_version",
            codec.encode(good[0]),
            b"ns/Deployment/w0",
            [("content-type", b"application/json"), ("schema-version", b"99")],
        ),
        ("content_type", b"\x84", b"ns/Deployment/w0", [("content-type", b"application/msgpack")]),
    ]
    before = {r: dead_letters(t.name, r) for r, *_ in bad}
    expect_bad_offsets: dict[int, str] = {}
    async with Producer(kafka_bootstrap) as p:
        offset = 0
        for i, sample in enumerate(good):
            await p.send(t, sample)
            offset += 1
            if i < len(bad):
                reason, value, key, headers = bad[i]
                await (await p.send_raw(t.name, value, key=key, headers=headers))
                expect_bad_offsets[offset] = reason
                offset += 1
        # also: a good message whose handler raises
        poison = events.MetricSample(
            workload="ns/Deployment/poison", metric="rps", value=0, timestamp=0
        )
        await p.send(t, poison)
        expect_bad_offsets[offset] = "handler"
        offset += 1
        tail = events.MetricSample(
            workload="ns/Deployment/tail", metric="rps", value=1, timestamp=9
        )
        await p.send(t, tail)
    n_good_total = len(good) + 1

    async def handler(m: Message[Any]) -> None:
        if m.value.workload == "ns/Deployment/poison":
            raise RuntimeError("the handler cannot take this one")

    async with Consumer(kafka_bootstrap, [t], group_id=f"dlq-{unique_suffix}") as c:
        got = await consume_until(c, lambda g: len(g) >= n_good_total, handler=handler)
    # the valid messages around the bad ones, in order (the poison one went to the DLQ)
    assert [m.value for m in got] == [*good, tail]

    dlq = await read_raw(kafka_bootstrap, t.dlq, len(expect_bad_offsets))
    assert len(dlq) == len(expect_bad_offsets)
    for rec in dlq:
        h = dict(rec.headers)
        off = int(h[H_DLQ_OFFSET])
        assert h[H_DLQ_REASON].decode() == expect_bad_offsets[off], h
        assert h[H_DLQ_TOPIC].decode() == t.name
        assert h[H_DLQ_PARTITION] == b"0"
        assert "governor-dlq-error" in h
    raw_bad = {r: v for r, v, _k, _h in bad}
    by_reason = {dict(r.headers)[H_DLQ_REASON].decode(): r for r in dlq}
    assert by_reason["decode"].value == raw_bad["decode"]  # the original bytes, untouched
    assert by_reason["decode"].key == b"ns/Deployment/x"
    assert by_reason["tombstone"].value is None
    counts: dict[str, int] = {}
    for r in expect_bad_offsets.values():
        counts[r] = counts.get(r, 0) + 1
    for reason, n in counts.items():
        assert dead_letters(t.name, reason) - before.get(reason, 0.0) == n, reason

    # committed past the bad ones: a new consumer of the group gets nothing more
    async with Consumer(kafka_bootstrap, [t], group_id=f"dlq-{unique_suffix}") as c2:
        assert await c2.client.committed(TopicPartition(t.name, 0)) == offset + 1


# --- compacted tables -----------------------------------------------------------------------------


async def test_compacted_topic_keeps_latest_per_key_and_tombstones_delete(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    t = renamed(events.WORKLOADS, f"test.table.{unique_suffix}", partitions=1)
    fast = {
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.001",
        "delete.retention.ms": "100",
        "min.compaction.lag.ms": "0",
    }
    await ensure_topics(kafka_bootstrap, [t], configs={t.name: fast})

    def state(name: str, replicas: int) -> events.WorkloadState:
        return events.WorkloadState(
            workload=f"ns/Deployment/{name}",
            spec_replicas=replicas,
            ready_replicas=replicas,
            observed_at=float(replicas),
        )

    async with Producer(kafka_bootstrap) as p:
        for s in (state("a", 1), state("b", 1), state("a", 2), state("c", 1), state("a", 3)):
            await p.send(t, s)
        await p.tombstone(t, "ns/Deployment/b")
        table = await read_table(kafka_bootstrap, t)
        assert table == {"ns/Deployment/a": state("a", 3), "ns/Deployment/c": state("c", 1)}

        # a global-table consumer (no group) sees the same by applying messages in order
        follow = Consumer(kafka_bootstrap, [t], group_id=None)
        await follow.start()
        seen: dict[str, Any] = {}

        async def apply(m: Message[Any]) -> None:
            if m.value is None:
                seen.pop(m.key, None)
            else:
                seen[m.key] = m.value

        try:
            await consume_until(follow, lambda g: len(g) >= 6, handler=apply)
        finally:
            await follow.stop()
        assert seen == table

        # force the broker's cleaner: roll the segment (segment.ms) with a later write, then
        # wait until the old values of "a" and "b" are physically gone
        await asyncio.sleep(0.3)
        await p.send(t, state("d", 1))
        await asyncio.sleep(0.3)
        await p.send(t, state("e", 1))

    async def compacted() -> bool:
        recs = await read_all_raw(kafka_bootstrap, t.name)
        keys = [r.key for r in recs]
        return keys.count(b"ns/Deployment/a") == 1 and b"ns/Deployment/b" not in [
            r.key for r in recs if r.value is not None
        ]

    deadline = time.monotonic() + 90
    while not await compacted():
        assert time.monotonic() < deadline, "the broker did not compact the topic within 90s"
        await asyncio.sleep(1)
    table = await read_table(kafka_bootstrap, t)
    assert table["ns/Deployment/a"] == state("a", 3)
    assert "ns/Deployment/b" not in table
    assert set(table) == {f"ns/Deployment/{k}" for k in "acde"}


# --- broker restart -------------------------------------------------------------------------------


async def test_no_acknowledged_message_is_lost_across_a_broker_restart(
    kafka_restartable: KafkaBroker, unique_suffix: str
) -> None:
    kafka_broker = kafka_restartable  # a private broker: bouncing it disturbs no other test
    bootstrap = kafka_broker.bootstrap
    t = renamed(events.ACTUATIONS, f"test.restart.{unique_suffix}", partitions=3)
    await ensure_topics(bootstrap, [t])

    acked: set[str] = set()
    failed: set[str] = set()
    errors: dict[str, int] = {}
    seen: list[str] = []

    async def handle(m: Message[Any]) -> None:
        seen.append(m.value.decision_id)

    consumer = Consumer(bootstrap, [t], group_id=f"restart-{unique_suffix}")
    await consumer.start()
    run = asyncio.create_task(consumer.run(handle))

    async def settle(fut: Awaitable[Any], did: str) -> None:
        try:
            await fut
            acked.add(did)
        except Exception as e:
            failed.add(did)
            errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1

    producer = Producer(bootstrap, request_timeout_ms=60_000)
    await producer.start()
    pending: list[asyncio.Task[None]] = []
    total = 3000
    restarted = asyncio.Event()

    published_while_down: list[int] = []
    down = False

    async def bounce() -> None:
        nonlocal down
        await asyncio.to_thread(kafka_broker.stop)
        down = True
        await asyncio.to_thread(kafka_broker.start)
        down = False
        restarted.set()

    bouncer: asyncio.Task[None] | None = None
    try:
        # At least `total` messages, and on until the broker is back: on a loaded machine the
        # stop alone can outlast a fixed-length stream, and then nothing overlaps the restart.
        i = 0
        while i < total or (bouncer is not None and not bouncer.done()):
            a = events.Actuation(
                decision_id=f"d{i}",
                workload=f"ns/Deployment/w{i % 17}",
                seq=i,
                outcome="applied",
                reason="test",
            )
            fut = await producer.publish(t, a)
            if down:
                published_while_down.append(i)
            pending.append(asyncio.create_task(settle(fut, a.decision_id)))
            if i == total // 3:
                bouncer = asyncio.create_task(bounce())
            await asyncio.sleep(0.002 if i % 10 else 0.01)
            i += 1
        assert bouncer is not None
        await bouncer
        await asyncio.gather(*pending)
        assert restarted.is_set()
        await wait_for(lambda: acked <= set(seen), 120, "every acked message at the consumer")
    finally:
        await producer.stop()
        await consumer.stop()
        await run
    assert published_while_down, "the broker restart did not overlap the stream"
    assert acked, "nothing was acknowledged"
    missing = acked - set(seen)
    assert not missing, f"{len(missing)} acknowledged messages lost"
    dups = len(seen) - len(set(seen))
    print(
        f"restart: {total} sent, {len(acked)} acked, {len(failed)} failed, "
        f"{len(set(seen))} consumed, {dups} duplicates (at-least-once, deduped by id); "
        f"{len(published_while_down)} published while the broker was down; errors {errors}"
    )


# --- committed offsets ----------------------------------------------------------------------------


@pytest.fixture
async def one_partition(kafka_bootstrap: str, unique_suffix: str) -> events.Topic[Any]:
    """A decisions topic of this test alone, of one partition: its offsets are one sequence."""
    t = renamed(events.DECISIONS, f"test.offsets.{unique_suffix}", partitions=1)
    await ensure_topics(kafka_bootstrap, [t])
    return t


async def test_a_restarted_consumer_resumes_from_its_committed_offset(
    kafka_bootstrap: str, unique_suffix: str, one_partition: events.Topic[Any]
) -> None:
    t, bootstrap = one_partition, kafka_bootstrap
    group = f"resume-{unique_suffix}"

    def decision(i: int) -> events.ScaleDecision:
        return events.ScaleDecision(
            decision_id=f"d{i}",
            workload="ns/Deployment/web",
            seq=i,
            from_replicas=1,
            to_replicas=2,
            reasons=[],
            inputs=[],
            policy_generation=1,
            newest_input=0,
            decided_at=0,
        )

    async with Producer(bootstrap) as p:
        for i in range(100):
            await p.publish(t, decision(i))
        await p.flush()

    first = Consumer(bootstrap, [t], group_id=group)
    await first.start()
    handled: list[int] = []

    async def stop_after_40(m: Message[Any]) -> None:
        handled.append(m.value.seq)
        if len(handled) == 40:
            first.request_stop()

    await first.run(stop_after_40)
    await first.stop()
    assert handled == list(range(40))

    async with Consumer(bootstrap, [t], group_id=group) as second:
        assert await second.client.committed(TopicPartition(t.name, 0)) == 40
        got = await consume_until(second, lambda g: len(g) >= 60)
    assert [m.value.seq for m in got] == list(range(40, 100))
    assert got[0].offset == 40


def _decision() -> events.ScaleDecision:
    return events.ScaleDecision(
        decision_id="d", workload="ns/Deployment/web", seq=1, from_replicas=1, to_replicas=2,
        reasons=[], inputs=[], policy_generation=1, newest_input=0, decided_at=0,
    )  # fmt: skip


async def test_a_new_member_commits_where_it_starts_before_handling_anything(
    kafka_bootstrap: str, unique_suffix: str, one_partition: events.Topic[Any]
) -> None:
    # A member killed before its first commit of processed offsets must not restart at the
    # group's reset point again (with `latest`, what was published meanwhile is never read).
    t, d = one_partition, _decision()
    async with Producer(kafka_bootstrap) as p:
        for _ in range(5):
            await p.publish(t, d)
        await p.flush()
    tp = TopicPartition(t.name, 0)
    async with Consumer(kafka_bootstrap, [t], group_id=f"start-{unique_suffix}") as c:
        got: list[Message[Any]] = []
        for _ in range(30):
            got += await c.poll(1000)
            if got:
                break
        # poll() commits nothing itself: this is the start, committed on the first fetch
        assert got and await c.client.committed(tp) == got[0].offset == 0


async def test_a_latest_member_killed_before_its_first_fetch_loses_nothing(
    kafka_bootstrap: str, unique_suffix: str, one_partition: events.Topic[Any]
) -> None:
    # A `latest` member (the decider) can die while its assignment hook still runs, before any
    # fetch: its successor must read what was published since, not start at a later end.
    t, d = one_partition, _decision()
    async with Producer(kafka_bootstrap) as p:
        for _ in range(3):  # before the group existed: `latest` skips these
            await p.publish(t, d)
        await p.flush()
        group = f"reset-{unique_suffix}"
        assigned = asyncio.Event()

        async def hook(tps: set[TopicPartition]) -> None:
            assigned.set()

        first = Consumer(kafka_bootstrap, [t], group_id=group, auto_offset_reset="latest",
                         on_assigned=hook)  # fmt: skip
        await first.start()
        try:
            for _ in range(30):  # the group is joined on the first poll
                await first.poll(200)
                if assigned.is_set():
                    break
            assert assigned.is_set()
        finally:
            await first.stop()  # handled nothing, committed nothing of its own
        for _ in range(4):
            await p.publish(t, d)
        await p.flush()
    async with Consumer(kafka_bootstrap, [t], group_id=group, auto_offset_reset="latest") as second:
        got = await consume_until(second, lambda g: len(g) >= 4)
    assert [m.offset for m in got] == [3, 4, 5, 6]


# --- topics, readiness ----------------------------------------------------------------------------


async def test_ensure_topics_is_idempotent_and_describe_reports(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    prefix = f"test.topics.{unique_suffix}"
    topics = [renamed(events.METRICS, prefix), renamed(events.POLICIES, prefix)]
    first = await ensure_topics(kafka_bootstrap, topics)
    assert len(first) == 4  # two topics, two dead-letter topics
    assert await ensure_topics(kafka_bootstrap, topics) == []
    descs = {d.name: d for d in await describe_topics(kafka_bootstrap, topics)}
    m, pol = descs[topics[0].name], descs[topics[1].name]
    assert m.exists and m.partitions == events.METRICS.partitions and m.problems == []
    assert pol.configs["cleanup.policy"] == "compact"
    assert descs[topics[1].dlq].configs["cleanup.policy"] == "delete"
    # a topic that drifted is repaired: more partitions, its configs back
    grown = [dataclasses.replace(topics[0], partitions=events.METRICS.partitions + 2)]
    actions = await ensure_topics(kafka_bootstrap, grown)
    assert any("partitions" in a for a in actions)
    (d, _dlq) = await describe_topics(kafka_bootstrap, grown)
    assert d.partitions == events.METRICS.partitions + 2


async def test_two_replicas_raising_the_same_partitions_at_once_both_succeed(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    # Two replicas of a service starting together after an upgrade that adds partitions: the
    # broker refuses the second raise (the count is already there); that is not a failure.
    topic = renamed(events.METRICS, f"test.race.{unique_suffix}")
    await ensure_topics(kafka_bootstrap, [topic], partitions=2)
    grown = [dataclasses.replace(topic, partitions=6)]
    both = await asyncio.gather(*(ensure_topics(kafka_bootstrap, grown) for _ in range(2)))
    assert any(any("raised" in a for a in actions) for actions in both), both
    (d, _dlq) = await describe_topics(kafka_bootstrap, grown)
    assert d.partitions == 6


async def test_start_gives_up_with_a_clear_error_when_no_broker_answers() -> None:
    p = Producer("127.0.0.1:1", start_timeout_s=1.0)
    assert not p.ready
    with pytest.raises(BusUnavailable, match=r"127\.0\.0\.1:1.*governor dev kafka up"):
        await p.start()
    assert not p.ready
    with pytest.raises(BusUnavailable, match=r"127\.0\.0\.1:1"):
        await ensure_topics("127.0.0.1:1", start_timeout_s=1.0)


async def test_the_liveness_probes_ask_a_broker_about_one_partition_or_no_topic(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    t = renamed(events.LOAD, f"test.probe.{unique_suffix}", partitions=3)
    await ensure_topics(kafka_bootstrap, [t])
    c = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
    await c.start()
    try:
        # Nothing known of its topics: every topic's metadata, as before (it still answers).
        assert await probe_partition(c, ["test.probe.none"]) is None
        c.assign([TopicPartition(t.name, 2), TopicPartition(t.name, 1)])
        assert await probe_partition(c, [t.name]) == TopicPartition(t.name, 1)
        c.unsubscribe()
        # No assignment: the first partition of its topics that the metadata knows (the assign
        # above fetched the topic's).
        assert await probe_partition(c, ["test.probe.none", t.name]) == TopicPartition(t.name, 0)
    finally:
        await c.stop()
    # A producer's probe: the cluster has topics (this one at least); the answer describes none.
    p = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await p.start()
    try:
        everything = await p.client.fetch_all_metadata()
        assert t.name in everything.topics()
        brokers, topics = await probe_brokers(p.client)
        assert (brokers, topics) == (len(everything.brokers()), 0)
        assert brokers >= 1
    finally:
        await p.stop()


async def test_ready_follows_the_client_lifecycle(kafka_bootstrap: str) -> None:
    p = Producer(kafka_bootstrap)
    assert not p.ready
    await p.start()
    assert p.ready
    await p.stop()
    assert not p.ready


async def test_poll_and_commit_and_batches_dead_letter_only_the_failing_message(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    t = renamed(events.LOAD, f"test.batches.{unique_suffix}", partitions=1)
    await ensure_topics(kafka_bootstrap, [t])

    def window(i: int) -> events.LoadWindow:
        return events.LoadWindow(
            workload="ns/Deployment/web",
            metric="rps",
            window="stable",
            start=i,
            end=i + 1,
            count=1,
            mean=i,
            max=i,
            p95=i,
            newest_sample=i,
        )

    async with Producer(kafka_bootstrap) as p:
        for i in range(20):
            await p.publish(t, window(i))
        await p.flush()

    # poll() + commit(): what poll returned counts as processed
    group = f"batches-{unique_suffix}"
    async with Consumer(kafka_bootstrap, [t], group_id=group, max_poll_records=5) as c:
        got: list[Message[Any]] = []
        while len(got) < 5:
            got += await c.poll(timeout_ms=1000)
        await c.commit()
        n_polled = len(got)
        assert [m.value.start for m in got] == list(range(n_polled))
        assert n_polled < 13

    # run_batches(): a batch whose handler fails is retried one by one; only #13 is dead
    handled: list[int] = []
    before = dead_letters(t.name, "handler")

    async def batch(msgs: list[Message[Any]]) -> None:
        if any(m.value.start == 13 for m in msgs):
            if len(msgs) == 1:
                raise ValueError("13 is unlucky")
            raise ValueError("retry me one by one")
        handled.extend(int(m.value.start) for m in msgs)

    c2 = Consumer(kafka_bootstrap, [t], group_id=group)
    await c2.start()
    task = asyncio.create_task(c2.run_batches(batch))
    try:
        await wait_for(lambda: len(handled) >= 19 - n_polled, 30, "batches")
    finally:
        c2.request_stop()
        await task
        await c2.stop()
    assert handled == [i for i in range(n_polled, 20) if i != 13]
    assert dead_letters(t.name, "handler") - before == 1
    (dead,) = await read_raw(kafka_bootstrap, t.dlq, 1)
    assert dict(dead.headers)[H_DLQ_OFFSET] == b"13"


async def test_topic_partitions_of_a_topic_created_after_the_consumer_started(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    c = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await c.start()
    try:
        t = renamed(events.ACTUATIONS, f"test.parts.{unique_suffix}", partitions=3)
        await ensure_topics(kafka_bootstrap, [t])
        assert not c.partitions_for_topic(t.name)  # the consumer's metadata predates the topic
        assert await topic_partitions(c, t.name, kafka_bootstrap, None) == {0, 1, 2}
    finally:
        await c.stop()


async def test_publish_many_lands_where_publish_does_in_the_same_order(
    kafka_bootstrap: str, unique_suffix: str
) -> None:
    """Record batches per partition (Producer.publish_many): every record on the partition,
    with the key and headers, that `publish` gives it, in the order given per partition; a
    small batch size splits a partition's records over several batches."""
    prefix = f"test.many.{unique_suffix}"
    one, many = (renamed(events.LOAD, f"{prefix}.{k}", partitions=3) for k in ("one", "many"))
    await ensure_topics(kafka_bootstrap, [one, many])
    values = [_window(f"ns/Deployment/w{i % 40}", float(i)) for i in range(400)]
    async with Producer(kafka_bootstrap, max_batch_size=4096) as p:
        await p.wait([await p.publish(one, v) for v in values])
        acks = await p.publish_many(many, values)
        await p.wait(acks)
        assert 3 < len(acks) < len(values), "one future per batch, several batches a partition"

    def by_partition(records: list[Any]) -> dict[int, list[tuple[bytes, bytes, Any]]]:
        out: dict[int, list[tuple[bytes, bytes, Any]]] = {}
        for r in records:
            out.setdefault(r.partition, []).append((r.key, r.value, list(r.headers)))
        return out

    async def read(name: str) -> list[Any]:
        async with from_start(kafka_bootstrap, name, partitions=3) as (c, _):
            out: list[Any] = []
            while len(out) < len(values):
                for records in (await c.getmany(timeout_ms=500)).values():
                    out += records
            return out

    expected, got = by_partition(await read(one.name)), by_partition(await read(many.name))
    assert got == expected
    assert len(expected) == 3


def _window(workload: str, t: float) -> events.LoadWindow:
    return events.LoadWindow(
        workload=workload, metric="rps", window="panic", start=t, end=t + 6.0, count=1,
        mean=1.0, max=2.0, p95=2.0, newest_sample=t, closed=False,
    )  # fmt: skip
