"""Topics of one test run alone, for the tests that start real services on a shared broker."""

from __future__ import annotations

import dataclasses
from typing import Any

from governor import events
from governor.events import Topic
from governor.topics import ensure_topics


async def run_topics(
    bootstrap: str, prefix: str, suffix: str, *topics: Topic[Any]
) -> list[Topic[Any]]:
    """Copies of `topics` named `<prefix>-<short name>-<suffix>` (`rb-metrics-1a2b` for
    governor.metrics), created on `bootstrap`, in order.

    Any other service on a shared broker (a benchmark, another test's aggregator or decider)
    consumes and publishes the governor.* topics too; a run's own copies keep its records apart.
    """
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
