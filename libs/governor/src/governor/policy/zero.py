"""KEDA-style scale to zero: activation from zero and cooldown to zero.

KEDA's operator does 0↔1 itself and leaves 1↔N to HPA: a workload at zero wakes only when a
metric is strictly above its activation threshold, and goes back to zero only when no metric has
been above it for `cooldownSeconds` (`lastActiveTime + cooldown < now`). Two deliberate choices:

* a metric without fresh data counts as active: an outage must not scale a workload to zero;
* with no record of activity yet (KEDA scales such a target to zero at once), the cooldown starts
  at the first evaluation instead, so a decider that lost its state never collapses a workload;
  `initialCooldownSeconds` (KEDA's initialCooldownPeriod) makes that first wait longer, never
  shorter: the cooldown is then counted from a point that far past the first evaluation.
"""

from __future__ import annotations

import msgspec

from governor.spec import ScaleToZeroSpec


def above_activation(spec: ScaleToZeroSpec, value: float | None) -> bool:
    return value is not None and value > spec.activation_threshold


class Idle(msgspec.Struct, frozen=True):
    """Whether the cooldown has run out, and when activity was last seen (the new state)."""

    cooled_down: bool
    last_active: float


def idle_check(spec: ScaleToZeroSpec, active: bool, last_active: float | None, now: float) -> Idle:
    if active:
        return Idle(False, now)
    if last_active is None:
        extra = max(0.0, (spec.initial_cooldown_seconds or 0.0) - spec.cooldown_seconds)
        return Idle(False, now + extra)
    return Idle(last_active + spec.cooldown_seconds < now, last_active)
