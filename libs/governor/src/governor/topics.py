"""Kafka topics from one declarative table: what `governor topics create|describe` does.

The table is `governor.events.TOPICS` (name, type, key, compacted, partitions, retention);
`specs()` turns it into broker-level settings, adding one `<topic>.dlq` per topic:

* compacted topics (policies, workloads, cluster) get `cleanup.policy=compact` and no time
  retention: the latest value per key is the state, a tombstone (null value) deletes it; one
  rewritten all the time (the decider's checkpoints) also rolls its segments (`segment.ms`);
* the others get `cleanup.policy=delete` with the contract's retention;
* dead-letter topics keep everything that went wrong for 14 days, `delete` policy (never
  compacted: two bad messages with one key are both evidence), one partition.

`ensure_topics()` is idempotent: it creates what is missing, raises partition counts that are
too low (never lowers them) and sets the configs that differ. `describe_topics()` says what the
broker has against what the table wants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import InvalidPartitionsError, TopicAlreadyExistsError, for_code

from governor.bus import start_client
from governor.events import TOPICS, Topic
from governor.kafka_security import aiokafka_options

DLQ_RETENTION_MS = 14 * 24 * 3600 * 1000
DLQ_PARTITIONS = 1


@dataclass(frozen=True)
class TopicSpec:
    """What one topic should look like on the broker."""

    name: str
    partitions: int
    configs: dict[str, str]
    compacted: bool = False
    dlq_of: str | None = None


@dataclass
class TopicDescription:
    """One topic as the broker has it, next to what the table wants."""

    name: str
    exists: bool
    wanted: TopicSpec
    partitions: int = 0
    replication_factor: int = 0
    configs: dict[str, str] = field(default_factory=dict)
    messages: int | None = None  # sum over partitions of (end offset - start offset)

    @property
    def problems(self) -> list[str]:
        """Differences from the table, in words (empty when it matches)."""
        if not self.exists:
            return ["missing"]
        out = []
        if self.partitions < self.wanted.partitions:
            out.append(f"partitions {self.partitions} < {self.wanted.partitions}")
        for k, v in self.wanted.configs.items():
            if self.configs.get(k) != v:
                out.append(f"{k}={self.configs.get(k)} (want {v})")
        return out


def spec_for(topic: Topic[Any], *, partitions: int | None = None) -> TopicSpec:
    configs = {"cleanup.policy": "compact" if topic.compacted else "delete"}
    if topic.compacted:
        configs["retention.ms"] = "-1"
        # keep tombstones a day so every table reader sees the delete before it goes
        configs["delete.retention.ms"] = str(24 * 3600 * 1000)
        if topic.segment_ms is not None:
            # Only closed segments are compacted. Once rolled, a segment of rewrites of the same
            # keys is mostly dirty, so the cleaner's default `min.cleanable.dirty.ratio` (0.5)
            # picks it up on its next pass: the roll is the one setting such a topic needs.
            configs["segment.ms"] = str(topic.segment_ms)
    else:
        configs["retention.ms"] = str(topic.retention_ms if topic.retention_ms else -1)
    return TopicSpec(
        name=topic.name,
        partitions=partitions or topic.partitions,
        configs=configs,
        compacted=topic.compacted,
    )


def dlq_spec_for(topic: Topic[Any]) -> TopicSpec:
    return TopicSpec(
        name=topic.dlq,
        partitions=DLQ_PARTITIONS,
        configs={"cleanup.policy": "delete", "retention.ms": str(DLQ_RETENTION_MS)},
        dlq_of=topic.name,
    )


def specs(
    topics: Iterable[Topic[Any]] = TOPICS,
    *,
    partitions: int | None = None,
    configs: Mapping[str, Mapping[str, str]] | None = None,
) -> list[TopicSpec]:
    """Every topic of the table plus its dead-letter topic.

    `partitions` overrides the table's count of the multi-partition topics (e.g. a small dev
    broker); `configs` adds or overrides topic configs by topic name (e.g. a fast
    `segment.ms` for a compaction test)."""
    out: list[TopicSpec] = []
    for t in topics:
        for s in (
            spec_for(t, partitions=partitions if t.partitions > 1 else None),
            dlq_spec_for(t),
        ):
            extra = (configs or {}).get(s.name)
            out.append(replace(s, configs={**s.configs, **extra}) if extra else s)
    return out


async def _admin(bootstrap: str, start_timeout_s: float) -> AIOKafkaAdminClient:
    """A started admin client; retries with backoff, then raises BusUnavailable."""
    # security from GOVERNOR_KAFKA_* (governor.kafka_security): on a secure broker, as admin
    return await start_client(
        lambda: AIOKafkaAdminClient(
            bootstrap_servers=bootstrap, client_id="governor-admin", **aiokafka_options(None)
        ),
        "admin",
        bootstrap,
        start_timeout_s,
    )


async def _metadata(admin: AIOKafkaAdminClient, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """name -> metadata dict (partitions, replicas) of the topics that exist."""
    # describe_topics() on a missing topic lets the broker auto-create it: ask only for those
    # list_topics() (a metadata request for all topics, which creates nothing) names.
    present = set(await admin.list_topics())
    asked = [n for n in names if n in present]
    if not asked:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for t in await admin.describe_topics(asked):
        if t.get("error_code", 0) == 0:
            out[t["topic"]] = t
    return out


async def _configs(admin: AIOKafkaAdminClient, names: Sequence[str]) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
    out: dict[str, dict[str, str]] = {}
    for resp in await admin.describe_configs(resources):
        for res in resp.resources:
            error_code, _msg, _rtype, name, entries = res[:5]
            if error_code:
                continue
            out[name] = {e[0]: e[1] for e in entries if e[1] is not None}
    return out


async def _replication(admin: AIOKafkaAdminClient, wanted: int | None) -> int:
    if wanted is not None:
        return wanted
    brokers = len((await admin.describe_cluster())["brokers"])
    return max(1, min(3, brokers))


async def _grow(admin: AIOKafkaAdminClient, grow: dict[str, NewPartitions]) -> list[str]:
    """Raise each topic's partition count. Another replica starting at the same moment may have
    raised them first: the broker then refuses the whole request (the count is already there),
    which is done, not an error, once a re-read shows every topic at its count."""
    try:
        await admin.create_partitions(grow)
    except InvalidPartitionsError:
        now = await _metadata(admin, list(grow))
        short = [
            n for n, p in grow.items() if len(now.get(n, {}).get("partitions", ())) < p.total_count
        ]
        if short:
            raise
        return []
    return [f"raised {n} to {p.total_count} partitions" for n, p in grow.items()]


async def ensure_topics(
    bootstrap: str,
    topics: Iterable[Topic[Any]] = TOPICS,
    *,
    partitions: int | None = None,
    replication_factor: int | None = None,
    configs: Mapping[str, Mapping[str, str]] | None = None,
    start_timeout_s: float = 30.0,
) -> list[str]:
    """Create every topic of the table and its `.dlq`, idempotently.

    Missing topics are created; existing ones get their partition count raised (never lowered)
    and their configs set when they differ. Returns what was done, one line per change (empty
    when everything already matched). `replication_factor` defaults to min(3, brokers).
    """
    wanted = specs(topics, partitions=partitions, configs=configs)
    admin = await _admin(bootstrap, start_timeout_s)
    try:
        actions: list[str] = []
        rf = await _replication(admin, replication_factor)
        existing = await _metadata(admin, [s.name for s in wanted])
        missing = [s for s in wanted if s.name not in existing]
        if missing:
            resp = await admin.create_topics(
                [NewTopic(s.name, s.partitions, rf, topic_configs=s.configs) for s in missing]
            )
            for name, code, *rest in resp.topic_errors:
                if code and for_code(code) is not TopicAlreadyExistsError:
                    msg = rest[0] if rest else ""
                    raise for_code(code)(f"creating {name}: {msg}")
            actions += [f"created {s.name} ({s.partitions} partitions, rf {rf})" for s in missing]
        present = [s for s in wanted if s.name in existing]
        grow = {
            s.name: NewPartitions(s.partitions)
            for s in present
            if len(existing[s.name]["partitions"]) < s.partitions
        }
        if grow:
            actions += await _grow(admin, grow)
        have = await _configs(admin, [s.name for s in present])
        alter = [
            s
            for s in present
            if any(have.get(s.name, {}).get(k) != v for k, v in s.configs.items())
        ]
        if alter:
            # AlterConfigs replaces the topic's dynamic configs: send the complete wanted set.
            for resp in await admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, s.name, s.configs) for s in alter]
            ):
                for code, msg, _rtype, name in resp.resources:
                    if code:
                        raise for_code(code)(f"setting configs of {name}: {msg}")
            actions += [f"set {s.name} configs {s.configs}" for s in alter]
        return actions
    finally:
        await admin.close()


async def describe_topics(
    bootstrap: str,
    topics: Iterable[Topic[Any]] = TOPICS,
    *,
    with_counts: bool = True,
    start_timeout_s: float = 30.0,
) -> list[TopicDescription]:
    """Each table topic and `.dlq` as the broker has it (see `TopicDescription.problems`)."""
    wanted = specs(topics)
    admin = await _admin(bootstrap, start_timeout_s)
    try:
        existing = await _metadata(admin, [s.name for s in wanted])
        configs = await _configs(admin, list(existing))
        out = []
        for s in wanted:
            meta = existing.get(s.name)
            d = TopicDescription(s.name, meta is not None, s)
            if meta is not None:
                d.partitions = len(meta["partitions"])
                d.replication_factor = max(
                    (len(p["replicas"]) for p in meta["partitions"]), default=0
                )
                d.configs = {k: v for k, v in configs.get(s.name, {}).items() if k in s.configs}
            out.append(d)
    finally:
        await admin.close()
    if with_counts:
        counts = await _message_counts(bootstrap, [d for d in out if d.exists])
        for d in out:
            d.messages = counts.get(d.name)
    return out


async def _message_counts(bootstrap: str, descs: Sequence[TopicDescription]) -> dict[str, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    if not descs:
        return {}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, **aiokafka_options(None)
    )
    await consumer.start()
    try:
        tps = [TopicPartition(d.name, p) for d in descs for p in range(d.partitions)]
        begin = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
        counts: dict[str, int] = {}
        for tp in tps:
            counts[tp.topic] = counts.get(tp.topic, 0) + end[tp] - begin[tp]
        return counts
    finally:
        await consumer.stop()


def render_descriptions(descs: Sequence[TopicDescription]) -> str:
    """A plain-text table for `governor topics describe`."""
    rows = [("TOPIC", "PARTITIONS", "RF", "CLEANUP", "RETENTION.MS", "MESSAGES", "STATUS")]
    for d in descs:
        rows.append(
            (
                d.name,
                str(d.partitions) if d.exists else "-",
                str(d.replication_factor) if d.exists else "-",
                d.configs.get("cleanup.policy", "-"),
                d.configs.get("retention.ms", "-"),
                "-" if d.messages is None else str(d.messages),
                "; ".join(d.problems) or "ok",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )
