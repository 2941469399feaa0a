"""A test session deletes the topics it made, and only those (tests.support.topics)."""

from __future__ import annotations

import pytest

from governor import events
from tests.support.topics import delete_minted, fresh_suffix, run_topics, topic_names
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_the_minted_topics_are_deleted_and_no_other(kafka_bootstrap: str) -> None:
    mine, other = fresh_suffix(), fresh_suffix()
    (ours,) = await run_topics(kafka_bootstrap, "st", mine, events.METRICS)
    (theirs,) = await run_topics(kafka_bootstrap, "st", other, events.METRICS)
    before = await topic_names(kafka_bootstrap)
    assert {ours.name, theirs.name} <= before
    gone = await delete_minted(kafka_bootstrap, {mine})
    assert ours.name in gone and all(mine in name for name in gone)  # and its dead letters

    async def deleted() -> None:
        after = await topic_names(kafka_bootstrap)
        assert not set(gone) & after
        assert {t for t in before if other in t} <= after and theirs.name in after

    await eventually(deleted)
    await delete_minted(kafka_bootstrap, {other})
