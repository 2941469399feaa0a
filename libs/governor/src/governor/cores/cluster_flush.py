"""The cluster collector's core as `governor.shell.run_core` runs it: the model (`ClusterCore`:
what the watches saw, what was last published) behind the schedule of its flushes.

Records in (`ClusterInput`): each object change a watch saw (`Watched`), and what the shell
learns about its inputs and its role: a target kind listed or not served (`TargetSeen`), the
Device CRD served or not (`DevicesServed`), the resync timer (`Resync`), the end of start-up
(`Started`), the Lease won with the tables read back (`Loaded`) or lost (`Lead(False)`).

`tick(now)` flushes (`Outputs.records`: the model's changes) only when all of these hold:

* start-up is over: the first flush must see every object listed, or it would tombstone keys
  whose objects were merely not listed yet;
* this instance leads: a follower's changes stay dirty until it leads (and then re-reads the
  tables: `Loaded`);
* something is dirty, and `coalesce_s` passed since the first tick that saw all of this: a
  burst of changes is one flush, so a key gets at most one message per flush whatever the churn.

The sink acknowledges each change the broker took (`acknowledge`: now the last published value)
and says whether the whole flush went out (`delivered`) or not (`undelivered`: all is marked
dirty and the next flush waits a backoff more). A compute that raises (a bug) is handled the
same way, and reported (`Report("failure", traceback)`), so one bad object cannot stop the
other keys' updates for good.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field

from governor.cores import Outputs
from governor.cores.cluster import (
    GVK,
    Change,
    ClusterCore,
    Report,
    Table,
    TargetStatus,
    Watched,
)
from governor.events import Event
from governor.retry import Backoff

__all__ = [
    "ClusterFlush",
    "ClusterInput",
    "DevicesServed",
    "Lead",
    "Loaded",
    "Resync",
    "Started",
    "TargetSeen",
]

# after a failed flush (a send or a compute): 0.5 s doubling to 30 s, on top of the coalescing
FAILURE_BACKOFF = Backoff(0.5, 30.0)


@dataclass(frozen=True)
class TargetSeen:
    """A target kind's watch listed (`synced`), or the kind is not served (`missing`)."""

    gvk: GVK
    status: TargetStatus


@dataclass(frozen=True)
class DevicesServed:
    """Whether the Device CRD is served (it may be installed or removed at any time)."""

    served: bool


@dataclass(frozen=True)
class Resync:
    """The resync timer: recompute everything from the watches' caches."""


@dataclass(frozen=True)
class Started:
    """Start-up is over: every watch listed, the target kinds of the listed policies too."""


@dataclass(frozen=True)
class Lead:
    """Leadership lost (`leading` False), or granted without re-reading the tables (True)."""

    leading: bool


@dataclass(frozen=True)
class Loaded:
    """The Lease won and the tables read back: what the previous leader published."""

    tables: Mapping[Table, Mapping[str, Event]] = field(default_factory=dict)


ClusterInput = Watched | TargetSeen | DevicesServed | Resync | Started | Lead | Loaded


class ClusterFlush:
    """The model, flushed on the schedule of the module docstring."""

    def __init__(self, model: ClusterCore, *, coalesce_s: float, leading: bool = True) -> None:
        self.model = model
        self.coalesce_s = coalesce_s
        self.leading = leading
        self.started = False
        self.due: float | None = None  # when the pending flush runs (set by the first tick)
        self.failures = 0  # failed flushes in a row (sends or computes)
        self.flushes = 0

    def on(self, record: ClusterInput) -> Outputs[Change]:
        m = self.model
        match record:
            case Watched():
                m.on(record)
            case TargetSeen(gvk, status):
                m.set_target_status(gvk, status)
            case DevicesServed(served):
                if served != m.devices_served:
                    m.devices_served = served
                    m.mark_all_dirty()
            case Resync():
                m.mark_all_dirty()
            case Started():
                self.started = True
                m.mark_all_dirty()
            case Lead(leading):
                self.leading = leading
            case Loaded(tables):
                for table, values in tables.items():
                    m.load_published(table, values)
                self.leading = True
                m.mark_all_dirty()
        return Outputs()

    def wait_s(self) -> float:
        """How long a flush waits once something is dirty: the coalescing, plus the backoff
        after failed flushes."""
        extra = FAILURE_BACKOFF.base(self.failures) if self.failures else 0.0
        return self.coalesce_s + extra

    def tick(self, now: float) -> Outputs[Change]:
        if not (self.started and self.leading and self.model.dirty):
            self.due = None  # the coalescing starts again once a flush may run
            return Outputs()
        if self.due is None:
            self.due = now + self.wait_s()
        if now < self.due:
            return Outputs()
        self.due = None
        try:
            changes = self.model.compute(now)
        except Exception:
            self.undelivered()
            self.model.reports.append(Report("failure", traceback.format_exc()))
            return Outputs()
        self.flushes += 1
        return Outputs(records=changes)

    def acknowledge(self, change: Change) -> None:
        """The broker has `change`: now the last published value of its key."""
        self.model.acknowledge(change)

    def delivered(self) -> None:
        """A flush went out whole (or was cut short by the Lease: the next leader has it)."""
        self.failures = 0

    def undelivered(self) -> None:
        """A flush did not go out whole: recompute everything, after a backoff."""
        self.failures += 1
        self.model.mark_all_dirty()
