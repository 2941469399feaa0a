"""Knative KPA panic mode: react on the short window, never scale down while panicking.

Ported from knative/serving `pkg/autoscaler/scaling/autoscaler.go` (Scale):

* over threshold when dppc / max(1, ready) ≥ threshold% / 100, dppc being the desired count the
  panic window asks for;
* crossing it enters panic (or extends it: Knative's `panicTime` is reset to `now` on every
  evaluation over the threshold — here `over_at`, with `since` kept for explanation);
* panic ends once a full stable window has passed since the last evaluation over the threshold
  (`over_at + stable_window < now`) and the current one is not over it;
* while panicking the desired count is max(stable desired, panic desired) and never decreases
  (`panic_max`, Knative's maxPanicPods).

Knative clamps dspc/dppc to its own scale-up/down rates; governor leaves rates to HPA's
`behavior`, which still applies after this step.
"""

from __future__ import annotations

import msgspec

from governor.spec import PanicSpec


class PanicOutcome(msgspec.Struct, frozen=True):
    desired: int
    since: float | None
    over_at: float | None
    panic_max: int
    over: bool
    entered: bool = False
    exited: bool = False

    @property
    def panicking(self) -> bool:
        return self.since is not None


def is_over(spec: PanicSpec, panic_desired: int, ready: int) -> bool:
    return panic_desired / max(1, ready) >= spec.threshold_percent / 100.0


def panic_step(
    spec: PanicSpec,
    *,
    stable_desired: int,
    panic_desired: int | None,
    ready: int,
    since: float | None,
    over_at: float | None,
    panic_max: int,
    now: float,
) -> PanicOutcome:
    """One evaluation of the panic state machine; `panic_desired` None means no panic data."""
    over = panic_desired is not None and is_over(spec, panic_desired, ready)
    entered = exited = False
    if over:
        if since is None:
            since, entered = now, True
        over_at = now
    elif since is not None and (over_at is None or over_at + spec.stable_window_seconds < now):
        since, over_at, panic_max, exited = None, None, 0, True
    if since is None:
        return PanicOutcome(stable_desired, None, None, 0, over, entered, exited)
    desired = stable_desired
    if panic_desired is not None and panic_desired > desired:
        desired = panic_desired
    if desired > panic_max:
        panic_max = desired
    return PanicOutcome(panic_max, since, over_at, panic_max, over, entered, exited)
