"""What is checked after every fault: pure functions over what a chaos run recorded.

Inputs are plain records (the decisions topic, the audit topic's Actuations, the targets' spec
replicas and seq annotation sampled from the API server, the closed load windows, the decider's
journals of inputs) and the fault-free reference (`Reference`: workload, wall time -> replicas).
Each function returns a count (0 = fine) or a duration; none reads a clock or does I/O, so each
is unit-tested on hand-built records (tests/unit/test_chaos_checks.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from governor import events

Reference = Callable[[str, float], int]  # (workload, wall time) -> expected spec replicas

CONVERGED_FOR_S = 10.0  # within the tolerance for this long in a row
TOLERANCE = 1  # replicas either side of the reference
CONVERGE_TARGET_S = 30.0  # the bound on converge_s
# The reference replays the trace on its own step grid; a live evaluation lands anywhere between
# two steps and on samples up to a collector interval apart, so a live scale-down may lead the
# reference's by a step or two (0.5-2.5 s seen). A scale-down is judged against the lowest
# reference within this much either side of it.
ALIGN_S = 3.0


@dataclass(frozen=True)
class SpecSample:
    """A target as the API server had it at `at`: spec replicas and the seq annotation."""

    at: float
    workload: str
    replicas: int
    seq: int | None


@dataclass(frozen=True)
class ClosedWindow:
    """A closed load window on the load topic; `key` names it in a decider's journal."""

    workload: str
    window: str  # stable | panic
    start: float
    end: float

    @property
    def key(self) -> tuple[str, str, float]:
        return (self.workload, self.window, self.start)


@dataclass(frozen=True)
class Verdict:
    """One fault's line: `fault=<name> converge_s=<x> lost=<n> duplicates=<n> regressions=<n>`,
    plus the checks that have no column of their own (reported after it)."""

    fault: str
    converge_s: float
    converged: bool
    lost: int
    duplicates: int
    regressions: int
    scale_down_on_missing: int
    unaudited: int
    older_input: int = 0
    # instances restarted after exiting on their own (harness: ChaosRun._restarter); not a
    # failed check: a Deployment restarts them, and the other checks say what it cost
    restarts: int = 0

    def line(self) -> str:
        return (
            f"fault={self.fault} converge_s={self.converge_s:.1f} lost={self.lost} "
            f"duplicates={self.duplicates} regressions={self.regressions}"
        )

    @property
    def ok(self) -> bool:
        return (
            self.converged
            and self.converge_s <= CONVERGE_TARGET_S
            and self.lost == self.duplicates == self.regressions == 0
            and self.scale_down_on_missing == self.unaudited == self.older_input == 0
        )


def _applied(actuations: Iterable[events.Actuation]) -> list[events.Actuation]:
    return [a for a in actuations if a.outcome == "applied"]


def lost_windows(
    closed: Iterable[ClosedWindow], evaluated: Collection[tuple[str, str, float]], until: float
) -> int:
    """Closed windows (ending by `until`) that reached no decider's stage 1: their key
    (workload, window, start) is in no decider's journal of inputs."""
    return sum(1 for w in closed if w.end <= until and w.key not in evaluated)


def duplicate_patches(actuations: Iterable[events.Actuation]) -> int:
    """Applied patches beyond the first for one (workload, seq): a seq applied twice."""
    count: dict[tuple[str, int], int] = defaultdict(int)
    for a in _applied(actuations):
        count[(a.workload, a.seq)] += 1
    return sum(n - 1 for n in count.values())


def seq_regressions(
    actuations: Iterable[events.Actuation], samples: Iterable[SpecSample] = ()
) -> int:
    """Times a target's seq went back: an applied patch (in audit order) below one applied
    before it, or the seq annotation read from the API server lower than an earlier reading."""
    regressions = 0
    top: dict[str, int] = {}
    for a in sorted(_applied(actuations), key=lambda a: a.at):
        if a.seq < top.get(a.workload, a.seq):
            regressions += 1
        top[a.workload] = max(top.get(a.workload, a.seq), a.seq)
    seen: dict[str, int] = {}
    for s in sorted(samples, key=lambda s: s.at):
        if s.seq is None:
            continue
        if s.seq < seen.get(s.workload, s.seq):
            regressions += 1
        seen[s.workload] = max(seen.get(s.workload, s.seq), s.seq)
    return regressions


def older_input(decisions: Iterable[events.ScaleDecision]) -> int:
    """Decisions (in seq order per workload) made on input older than an earlier decision's:
    a redelivered window must not drive the target back to what older data said."""
    bad = 0
    newest: dict[str, float] = {}
    for d in sorted(decisions, key=lambda d: (d.workload, d.seq)):
        if d.newest_input < newest.get(d.workload, d.newest_input):
            bad += 1
        newest[d.workload] = max(newest.get(d.workload, d.newest_input), d.newest_input)
    return bad


POOL_CUTS: frozenset[events.Rule] = frozenset({"capacity", "priority", "fair_share", "device_fit"})


def scale_downs_on_missing_data(
    decisions: Iterable[events.ScaleDecision],
    start: float,
    end: float,
    reference: Reference,
    exempt: Collection[events.Rule] = POOL_CUTS,
) -> int:
    """Decisions made in [start, end] (the fault and its heal) that scale down on missing
    data: a fallback scale-down, or a scale-down below what the reference asks within ALIGN_S
    (less the tolerance), which the load never called for. A cut the pool's allocation made
    (`POOL_CUTS`: a node left the pool, a higher tier took the room) is exempt while the
    reference replays each workload alone, with no pool to run out of; against a reference
    that allocates the pool (`pool.PoolReference`, `exempt` empty) it is judged like any other."""
    bad = 0
    for d in decisions:
        if not start <= d.decided_at <= end or d.to_replicas >= d.from_replicas:
            continue
        if any(r.rule in exempt for r in d.reasons):
            continue
        fallback = any(r.rule == "fallback" for r in d.reasons)
        lowest = min(reference(d.workload, d.decided_at + k * ALIGN_S / 6) for k in range(-6, 7))
        if fallback or d.to_replicas < lowest - TOLERANCE:
            bad += 1
    return bad


# What audits a seq the target carries: the patch's own record, or (the actuator killed between
# its patch and the audit send, so the decision was redelivered) the redelivery's `replay`.
AUDITS_A_PATCH: frozenset[events.ActuationOutcome] = frozenset({"applied", "noop", "replay"})


def unaudited(samples: Iterable[SpecSample], actuations: Iterable[events.Actuation]) -> int:
    """Seqs a target carried (its seq annotation: a decision was applied) with no Actuation
    saying so (`AUDITS_A_PATCH`) for that (workload, seq) on the audit topic. A refusal does
    not count: it says the decision was not applied."""
    audited = {(a.workload, a.seq) for a in actuations if a.outcome in AUDITS_A_PATCH}
    carried = {(s.workload, s.seq) for s in samples if s.seq is not None}
    return len(carried - audited)


def convergence(
    samples: Sequence[SpecSample],
    reference: Reference,
    workloads: Iterable[str],
    heal: float,
    *,
    hold: float = CONVERGED_FOR_S,
    tolerance: int = TOLERANCE,
) -> float | None:
    """Seconds from `heal` to the start of the first stretch of `hold` seconds in which every
    workload's spec replicas (the latest sample at each sampled instant) were within
    `tolerance` of the reference; None if the samples show no such stretch (yet)."""
    wanted = set(workloads)
    latest: dict[str, SpecSample] = {}
    since: float | None = None
    for s in sorted(samples, key=lambda s: s.at):
        if s.workload not in wanted:
            continue
        latest[s.workload] = s
        if s.at < heal:
            continue
        ok = len(latest) == len(wanted) and all(
            abs(x.replicas - reference(w, s.at)) <= tolerance for w, x in latest.items()
        )
        if not ok:
            since = None
            continue
        since = s.at if since is None else since
        if s.at - since >= hold:
            return since - heal
    return None
