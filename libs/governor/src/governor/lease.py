"""Leader election on a `coordination.k8s.io/v1` Lease: the pure core (the shell is
`governor.lease_shell.LeaseElector`).

The protocol is client-go's leaderelection: the Lease names its `holderIdentity`, the
`leaseDurationSeconds` it claims, its `acquireTime`/`renewTime` and how often it changed hands
(`leaseTransitions`); every write carries the `resourceVersion` last read, so of two candidates
writing at once exactly one succeeds (409 Conflict for the other).

Time. Nobody trusts another process's clock: a candidate takes over only when it has itself seen
the Lease *unchanged* (same resourceVersion) for `leaseDurationSeconds` of its own monotonic
clock (`Observation.observed_at`), never by comparing `renewTime` with its clock. The holder
counts itself leader only until `renew_deadline_s` after the *start* of its last successful
write (`Candidate.renewed_at`). The write's start comes before the server stored it, which comes
before any candidate saw it, so with `renew_deadline_s < lease_duration_s` the holder has stopped
before anyone else may start: never two leaders at one instant, given clocks that run at the
same rate (`tests/unit/test_lease.py` checks it on random schedules).

    state = observe(state, record, resource_version, now)     # after each GET
    action = plan(state, me, now)                             # acquire | renew | follow
    state = wrote(state, started_at)                          # after a successful write
    leader = is_leader(state, now, renew_deadline_s)
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = [
    "Action",
    "Candidate",
    "LeaseRecord",
    "Observation",
    "check_timing",
    "is_leader",
    "lost",
    "observe",
    "plan",
    "record_for",
    "wrote",
]

Action = Literal["acquire", "renew", "follow"]


class LeaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A Lease's spec as the core sees it (times are the writer's wall clock, for people and
    tools only; the protocol never compares them with a local clock)."""

    holder: str | None = None
    duration_s: float = 15.0
    acquire_time: float | None = None
    renew_time: float | None = None
    transitions: int = 0


class Observation(msgspec.Struct, frozen=True, kw_only=True):
    """The Lease as last read: `record` None when no Lease exists; `observed_at` is this
    process's monotonic time when it first saw this `resource_version`."""

    record: LeaseRecord | None
    resource_version: str | None
    observed_at: float


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    """One process's view: the last observation, and the start of its last successful write
    while holding (None: it does not hold the Lease)."""

    seen: Observation | None = None
    renewed_at: float | None = None


def check_timing(lease_duration_s: float, renew_deadline_s: float, retry_period_s: float) -> None:
    """client-go's constraints: duration > renew deadline > retry period > 0."""
    if not 0 < retry_period_s < renew_deadline_s < lease_duration_s:
        raise ValueError(
            "leader election needs 0 < retry_period < renew_deadline < lease_duration, got "
            f"{retry_period_s}, {renew_deadline_s}, {lease_duration_s}"
        )


def observe(
    state: Candidate, record: LeaseRecord | None, resource_version: str | None, now: float, me: str
) -> Candidate:
    """The state after reading the Lease at `now`. A Lease held by someone else ends this
    process's leadership at once (it was taken over, or never ours)."""
    prev = state.seen
    same = prev is not None and prev.resource_version == resource_version
    seen = Observation(
        record=record,
        resource_version=resource_version,
        observed_at=prev.observed_at if same and prev is not None else now,
    )
    holder = record.holder if record is not None else None
    renewed_at = state.renewed_at if holder == me else None
    return Candidate(seen=seen, renewed_at=renewed_at)


def plan(state: Candidate, me: str, now: float) -> Action:
    """What to do now: take a free or expired Lease, renew our own, or follow its holder."""
    seen = state.seen
    if seen is None:
        return "follow"  # read it first
    rec = seen.record
    if rec is None or not rec.holder:
        return "acquire"
    if rec.holder == me:
        return "renew"
    if now >= seen.observed_at + rec.duration_s:
        return "acquire"  # unchanged for a whole lease duration on our own clock: expired
    return "follow"


def record_for(
    action: Action, seen: LeaseRecord | None, me: str, wall_now: float, duration_s: float
) -> LeaseRecord:
    """The record to write for `action` ("acquire" or "renew"): a change of holder counts a
    transition and sets acquireTime; a renewal only moves renewTime."""
    if action == "follow":
        raise ValueError("following writes nothing")
    old = seen or LeaseRecord()
    if action == "renew" and old.holder == me:
        return msgspec.structs.replace(old, duration_s=duration_s, renew_time=wall_now)
    changed = seen is not None and old.holder != me  # a new Lease starts at 0 transitions
    return LeaseRecord(
        holder=me,
        duration_s=duration_s,
        acquire_time=wall_now,
        renew_time=wall_now,
        transitions=old.transitions + (1 if changed else 0),
    )


def wrote(state: Candidate, started_at: float) -> Candidate:
    """A write of ours (acquire or renew) that began at `started_at` succeeded."""
    return msgspec.structs.replace(state, renewed_at=started_at)


def lost(state: Candidate) -> Candidate:
    """Leadership given up (a failed write after the renew deadline, or a stop)."""
    return msgspec.structs.replace(state, renewed_at=None)


def is_leader(state: Candidate, now: float, renew_deadline_s: float) -> bool:
    """Leader until `renew_deadline_s` after the start of the last successful write."""
    return state.renewed_at is not None and now < state.renewed_at + renew_deadline_s
