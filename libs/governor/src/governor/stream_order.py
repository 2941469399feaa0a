"""Deliver each partition of a stream in offset order, once, across rebalances.

faust-streaming 0.15.3 can hand the agent records it fetched before a rebalance after the seek
to the committed offset: records from where the worker had fetched to, past some that were
fetched and then dropped with the stream buffers. faust then takes the jump for a compacted
topic's gap and drops the records the seek fetches again as already read: a sample is lost. So
per partition the next offset to fold is known: a record behind it is a duplicate, the first one
ahead of it asks for a seek back to it (`seek`), and later ones are stale until it arrives. Pure
bookkeeping; the aggregator says where a partition resumes, feeds every record through it and
does the seek.

One seek is not always enough: faust's fetch loop may still be handing over a batch it fetched
before the seek, and each record of it moves faust's read offset past the seek's again, so the
re-fetched records are dropped once more as already read (seen in the rebalance tests: 164
records skipped "ahead", then the gap taken, 15 windows of a workload lost). While records keep
arriving ahead, the seek is asked for again, after 1 s, then 2, 4, ... (a re-fetch slower than
that is not cut off each time). The clock asks for it too (`due_seeks`): when the source has
gone quiet no record comes ahead any more, and a partition whose re-fetch was dropped stayed in
its gap, its last samples unfolded, until new ones came (seen in the rebalance test with 10 s
between checkpoints: 926 records skipped ahead, and each workload's last window never came).
The wait stops growing at `MAX_RESEEK_WAIT_S`: doubling without a cap, the last seek came 15 s
into the 30 s gap timeout, so a partition whose early seeks were undone had no further chance
for half of it (a suspect, not a proven cause, for one CI run of the rebalance test in four in
which a workload's last 7 windows never came, with 15 records skipped ahead).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal

Step = Literal["deliver", "duplicate", "seek", "ahead"]

MAX_RESEEK_WAIT_S = 4.0


class StreamOrder:
    """The next offset of each partition, from its resume point on.

    `unknown(tp)`: nothing is known since the partitions last moved; the caller then says where
    the partition resumes (`resume`; None: from whatever comes first). A gap that stays open for
    `gap_timeout` seconds is taken as records deleted by retention: nothing brings them back, so
    the jump is taken rather than stalling the partition for good.
    """

    def __init__(self, gap_timeout: float, reseek_after: float = 1.0) -> None:
        self.gap_timeout = gap_timeout
        self.reseek_after = reseek_after
        self.max_wait = max(MAX_RESEEK_WAIT_S, reseek_after)  # the wait doubles up to this
        self.next: dict[Hashable, int | None] = {}
        self.gap_since: dict[Hashable, float] = {}
        # Per partition in a gap: the offset sought, when, and how long until the next seek.
        self.sought: dict[Hashable, tuple[int, float, float]] = {}

    def moved(self) -> None:
        """Partitions were revoked: every resume point is unknown again."""
        self.next.clear()
        self.gap_since.clear()
        self.sought.clear()

    def unknown(self, tp: Hashable) -> bool:
        return tp not in self.next

    def resume(self, tp: Hashable, offset: int | None) -> None:
        self.next[tp] = offset

    def step(self, tp: Hashable, offset: int, now: float) -> Step:
        """What to do with the record at `offset` of `tp`, seen at `now` (seconds). "seek":
        skip it and seek `tp` back to `expected(tp)` (again, if the last seek is a while back and
        records still come ahead); "ahead", "duplicate": skip it."""
        expected = self.next.get(tp)
        if expected is not None and offset < expected:
            return "duplicate"
        if expected is not None and offset > expected:
            since = self.gap_since.setdefault(tp, now)
            if now - since < self.gap_timeout:
                last = self.sought.get(tp)
                if last is None or last[0] != expected:
                    self.sought[tp] = (expected, now, self.reseek_after)
                    return "seek"
                return "seek" if self._seek_again(tp, now) else "ahead"
        self.next[tp] = offset + 1
        self.gap_since.pop(tp, None)
        self.sought.pop(tp, None)
        return "deliver"

    def due_seeks(self, now: float) -> list[tuple[Hashable, int]]:
        """The partitions in a gap whose last seek is a wait ago (the wait doubled, as `step`
        does), within the gap timeout: sought again whether or not records come ahead."""
        in_time = [tp for tp in self.sought if now - self.gap_since[tp] < self.gap_timeout]
        return [(tp, self.sought[tp][0]) for tp in in_time if self._seek_again(tp, now)]

    def _seek_again(self, tp: Hashable, now: float) -> bool:
        """Whether `tp`'s last seek is its wait ago: then it is sought again, the wait doubled
        up to `MAX_RESEEK_WAIT_S`."""
        offset, at, wait = self.sought[tp]
        if now - at < wait:
            return False
        self.sought[tp] = (offset, now, min(wait * 2, self.max_wait))
        return True

    def expected(self, tp: Hashable) -> int | None:
        return self.next.get(tp)
