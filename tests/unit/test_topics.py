"""governor.topics.specs: the broker-level settings the topic table asks for."""

from __future__ import annotations

from governor import events
from governor.topics import specs


def test_only_the_checkpoint_topic_rolls_its_segments_for_compaction() -> None:
    by_name = {s.name: s for s in specs()}
    state = by_name[events.DECIDER_STATE.name].configs
    # The broker compacts closed segments only: rewritten every few seconds per workload, the
    # checkpoints must leave the active segment within a minute.
    assert state["cleanup.policy"] == "compact" and state["segment.ms"] == "60000"
    rolled = {n for n, s in by_name.items() if "segment.ms" in s.configs}
    assert rolled == {events.DECIDER_STATE.name}
