"""Each service's decisions as a pure core: every read is an argument, nothing does I/O.
The service (the shell, `governor.shell.run_core`) reads what a core asks for, and writes what
it returns.

Every core has one shape: `on(record) -> Outputs` for each input record and `tick(now) ->
Outputs` for the clock. `Outputs` names the checkpoints to persist (and have acknowledged)
before the records are published; the shell commits the input only after both."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

In_contra = TypeVar("In_contra", contravariant=True)
Out = TypeVar("Out")

__all__ = ["Core", "Outputs"]


@dataclass
class Outputs(Generic[Out]):
    """What one step produced: checkpoints first (persisted and acknowledged), then records."""

    checkpoints: list[Out] = field(default_factory=list)
    records: list[Out] = field(default_factory=list)

    def __add__(self, other: Outputs[Out]) -> Outputs[Out]:
        return Outputs(self.checkpoints + other.checkpoints, self.records + other.records)

    def __bool__(self) -> bool:
        return bool(self.checkpoints or self.records)


class Core(Protocol[In_contra, Out]):
    """A service's decisions. `on` (and `tick`) may be a coroutine where the answer needs reads
    the shell makes between pure steps (the actuator: `cores.actuator.decide` asks, the shell
    reads), or where the service's shell adapts a core that publishes as it goes (the decider)."""

    def on(self, record: In_contra) -> Outputs[Out] | Awaitable[Outputs[Out]]: ...

    def tick(self, now: float) -> Outputs[Out] | Awaitable[Outputs[Out]]: ...
