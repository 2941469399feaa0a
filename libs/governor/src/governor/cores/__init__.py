"""Each service's decisions as a pure core: every read is an argument, nothing does I/O.
The service (the shell, `governor.shell.run_core`) reads what a core asks for, and writes what
it returns.

Every core has one shape: `on(record) -> Outputs` for each input record and `tick(now) ->
Outputs` for the clock. `Outputs` names the checkpoints to persist (and have acknowledged)
before the records are published; the shell commits the input only after both. A step that must
go out in ordered rounds (the decider: its evaluations, then each pool's allocation, each
round's checkpoints acknowledged before its records) chains them with `then`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

In_contra = TypeVar("In_contra", contravariant=True)
Out = TypeVar("Out")

__all__ = ["Core", "Outputs"]


@dataclass
class Outputs(Generic[Out]):
    """What one step produced: checkpoints first (persisted and acknowledged), then records,
    then the `after` hooks (what must see the records acknowledged: a latency measured to the
    ack); then each of the `later` rounds the same way, in order."""

    checkpoints: list[Out] = field(default_factory=list)
    records: list[Out] = field(default_factory=list)
    after: list[Callable[[], None]] = field(default_factory=list)
    later: list[Outputs[Out]] = field(default_factory=list)

    def rounds(self) -> Iterator[Outputs[Out]]:
        """This round, then the later ones (each without `later`)."""
        yield Outputs(self.checkpoints, self.records, self.after)
        for later in self.later:
            yield from later.rounds()

    def then(self, other: Outputs[Out]) -> Outputs[Out]:
        """`other`'s rounds only once every round of this one is acknowledged."""
        return Outputs(self.checkpoints, self.records, self.after, [*self.later, *other.rounds()])

    def __add__(self, other: Outputs[Out]) -> Outputs[Out]:
        """Two steps as one: `other`'s first round joins this one's last (its checkpoints
        beside ours, acknowledged before either's records), its later rounds follow. Each
        step's own order holds (a key's checkpoints and records stay in step order), and two
        single rounds cost one round trip, not two."""
        if not self.later and not other.later:  # every service but the decider
            return Outputs(
                self.checkpoints + other.checkpoints,
                self.records + other.records,
                self.after + other.after,
            )
        mine, theirs = list(self.rounds()), list(other.rounds())
        last, first = mine[-1], theirs[0]
        joint = Outputs(
            last.checkpoints + first.checkpoints,
            last.records + first.records,
            last.after + first.after,
        )
        every = [*mine[:-1], joint, *theirs[1:]]
        head = every[0]
        return Outputs(head.checkpoints, head.records, head.after, every[1:])

    def __bool__(self) -> bool:
        return any(r.checkpoints or r.records or r.after for r in self.rounds())


class Core(Protocol[In_contra, Out]):
    """A service's decisions. `on` (and `tick`) may be a coroutine where the answer needs reads
    the shell makes between pure steps (the actuator: `cores.actuator.decide` asks, the shell
    reads; the decider: a fetch whose handler dead-letters what raises)."""

    def on(self, record: In_contra) -> Outputs[Out] | Awaitable[Outputs[Out]]: ...

    def tick(self, now: float) -> Outputs[Out] | Awaitable[Outputs[Out]]: ...
