"""Topics of one test run alone, for the tests that start real services on a shared broker, and
their deletion at the end of the session."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Collection
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from governor import events
from governor.events import Topic
from governor.topics import ensure_topics

# The random fragments this session put in topic names (`mint`): the session's own topics, which
# `delete_minted` deletes at its end. Without it a developer's long-lived broker kept every run's
# topics and their dead-letter topics: 775 partitions and 953 MiB after a day of test runs.
MINTED: set[str] = set()


def mint(fragment: str) -> str:
    """`fragment` (random, unique to this session), remembered: a topic whose name holds it is
    this session's, deleted at its end."""
    MINTED.add(fragment)
    return fragment


def fresh_suffix(length: int = 12) -> str:
    """A random fragment of `length` hex digits for the names a test makes, `mint`ed."""
    return mint(uuid.uuid4().hex[:length])


@contextlib.asynccontextmanager
async def _admin(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def topic_names(bootstrap: str) -> set[str]:
    """Every topic on `bootstrap`."""
    async with _admin(bootstrap) as admin:
        return set(await admin.list_topics())


async def delete_minted(bootstrap: str, fragments: Collection[str] = MINTED) -> list[str]:
    """Delete the topics on `bootstrap` whose names hold one of `fragments` (by default those
    `mint`ed by this session; services' own topics too: an aggregator's changelog is named after
    its run's app id). Returns their names."""
    if not fragments:
        return []
    async with _admin(bootstrap) as admin:
        doomed = [t for t in await admin.list_topics() if any(f in t for f in fragments)]
        if doomed:
            await admin.delete_topics(doomed)
        return doomed


async def run_topics(
    bootstrap: str, prefix: str, suffix: str, *topics: Topic[Any]
) -> list[Topic[Any]]:
    """Copies of `topics` named `<prefix>-<short name>-<suffix>` (`rb-metrics-1a2b` for
    governor.metrics), created on `bootstrap`, in order.

    Any other service on a shared broker (a benchmark, another test's aggregator or decider)
    consumes and publishes the governor.* topics too; a run's own copies keep its records apart.
    """
    mint(suffix)
    ours = [
        dataclasses.replace(t, name=f"{prefix}-{t.name.removeprefix('governor.')}-{suffix}")
        for t in topics
    ]
    await ensure_topics(bootstrap, ours)
    return ours


# The samples-to-decisions path: what an aggregator reads and writes, then a decider.
PIPELINE: tuple[Topic[Any], ...] = (
    events.METRICS,
    events.LOAD,
    events.RECOMMENDATIONS,
    events.DECISIONS,
)
