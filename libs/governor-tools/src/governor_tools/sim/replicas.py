"""The replica model: what a Deployment does with the replica count it is given.

A replica requested at t serves from t + startup (scheduling, image pull, readiness). A removed
replica stops serving at once. On scale-down the youngest replicas go first, so pods still
starting are removed before serving ones, as a ReplicaSet prefers deleting unready pods.
"""

from __future__ import annotations

import bisect

import msgspec


class Replicas(msgspec.Struct, frozen=True):
    """One entry per requested replica: the time it serves from, sorted."""

    ready_at: tuple[float, ...] = ()

    @property
    def requested(self) -> int:
        return len(self.ready_at)

    def ready(self, t: float) -> int:
        """Replicas serving at time t."""
        return bisect.bisect_right(self.ready_at, t)

    def next_ready_after(self, t: float) -> float | None:
        i = bisect.bisect_right(self.ready_at, t)
        return self.ready_at[i] if i < len(self.ready_at) else None


def serving(n: int, since: float) -> Replicas:
    return Replicas(ready_at=(since,) * n)


def scale(replicas: Replicas, desired: int, now: float, startup_seconds: float) -> Replicas:
    """The replicas after asking for `desired` at `now`."""
    have = replicas.requested
    if desired > have:
        return Replicas(ready_at=replicas.ready_at + (now + startup_seconds,) * (desired - have))
    if desired < have:
        return Replicas(ready_at=replicas.ready_at[: max(desired, 0)])
    return replicas
