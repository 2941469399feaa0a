"""governor_bus_consumer_lag: per topic and group, summed over the partitions a process owns."""

from __future__ import annotations

from aiokafka import TopicPartition
from prometheus_client import REGISTRY

from governor.bus import record_consumer_lag


def _gauge(topic: str, group: str) -> float | None:
    return REGISTRY.get_sample_value("governor_bus_consumer_lag", {"topic": topic, "group": group})


def test_lag_sums_owned_partitions_per_topic_and_sets_the_gauge() -> None:
    a0, a1, b0 = TopicPartition("t.a", 0), TopicPartition("t.a", 1), TopicPartition("t.b", 0)
    lag = record_consumer_lag(
        "g-sum",
        ["t.a", "t.b", "t.c"],
        ends={a0: 100, a1: 50, b0: 7},
        done={a0: 90, a1: 50, b0: 9},  # b0 ahead of a stale end: never negative
    )
    assert lag == {"t.a": 10, "t.b": 0, "t.c": 0}
    assert _gauge("t.a", "g-sum") == 10
    assert _gauge("t.b", "g-sum") == 0
    assert _gauge("t.c", "g-sum") == 0  # owns no partition of it: 0, so sums over instances work


def test_unknown_ends_or_positions_count_zero_and_foreign_topics_are_ignored() -> None:
    a0, a1, x0 = TopicPartition("u.a", 0), TopicPartition("u.a", 1), TopicPartition("u.x", 0)
    lag = record_consumer_lag(
        "g-unknown", ["u.a"], ends={a0: None, a1: 30, x0: 99}, done={a0: 5, a1: None, x0: 0}
    )
    assert lag == {"u.a": 0}
    assert _gauge("u.x", "g-unknown") is None


def test_lag_follows_progress() -> None:
    tp = TopicPartition("v.a", 0)
    record_consumer_lag("g-progress", ["v.a"], ends={tp: 1000}, done={tp: 0})
    assert _gauge("v.a", "g-progress") == 1000
    record_consumer_lag("g-progress", ["v.a"], ends={tp: 1200}, done={tp: 1150})
    assert _gauge("v.a", "g-progress") == 50
