"""The metric collector's core, without I/O: what it decides between a source and the topic.

The shell (`governor_collector`) has two kinds of input, both handing samples in as `Offered`:
the pollers (one loop per pull source: `next_poll` says when it polls next) and the HTTP push
endpoint. `run_core` answers each offer with its delivery (`Outputs.records`), the sink
publishes it and answers the offer's ticket once the broker acknowledged every sample (or
failed to), so a push is answered, and a poll counted, only after its samples are durable.

Which sources run where is `governor_collector.scheduler.plan` (pure too); whether a source is
up or down, and when that is worth a log line, is `SourceHealth`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from governor.cores import Outputs
from governor.events import MetricSample

__all__ = ["CollectorCore", "Offered", "SourceHealth", "next_poll"]

T = TypeVar("T")  # the shell's ticket: what it answers once the samples are acknowledged


@dataclass(frozen=True)
class Offered(Generic[T]):
    """Samples a poll or a push hands in; `lane` keeps one input's offers in order."""

    samples: Sequence[MetricSample]
    ticket: T
    lane: str


class CollectorCore(Generic[T]):
    """Every offer with samples is delivered as it came (the sink batches them per partition);
    an empty one has nothing to wait for."""

    def on(self, record: Offered[T]) -> Outputs[Offered[T]]:
        return Outputs(records=[record]) if record.samples else Outputs()

    def tick(self, now: float) -> Outputs[Offered[T]]:
        return Outputs()


@dataclass
class SourceHealth:
    """A source's state: the reason it is down (`last`), None while it is up, "never" before
    its first poll. Each method says whether the state changed (worth one log line: a source
    failing the same way every poll logs once)."""

    last: str | None = "never"

    def failed(self, reason: str) -> bool:
        changed = reason != self.last
        self.last = reason
        return changed

    def published(self) -> bool:
        changed = self.last is not None
        self.last = None
        return changed


def next_poll(next_at: float, interval: float, now: float) -> float:
    """When a source polls next: one interval after its last slot, but after a slow poll not
    before now (the missed ticks are skipped rather than bunched up)."""
    return max(next_at + interval, now)
