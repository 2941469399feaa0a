"""The windows a workload's policy asks for: sizes and hops, bounded. One pure function for the
aggregator (live) and the simulator and scenario runner (replay), so both see the same windows.

Sizes
    A policy with `panic` is scaled on a stable window of `panic.stableWindowSeconds` and a
    panic window of `panic.windowSeconds`; without panic (or without a policy) the caller's
    defaults hold (the aggregator's settings; the simulator's one decision step).

Hops
    A window of `size` seconds hops by gcd(size, grid) (whole seconds; else by 1 s, or by the
    size below 1 s): with hop dividing both, a window closes at every multiple of the grid. The
    grid is the simulator's decision step, so a closed window always ends at a decision; the
    aggregator's is its `hop_grid_seconds` (10 s: the default 60 s and 6 s windows hop by 10 s
    and 2 s, its configured defaults).

Limits (named, so docs/scalingpolicy.md and the validation quote them)
    `MAX_WINDOW_SECONDS`: a policy's windows are at most 600 s. The aggregator keeps every
    sample of an open window (its p95 is exact) in its table value, checkpointed per workload:
    a 600 s window at a sample a second holds 600 values per open window.
    `MAX_OPEN_WINDOWS`: a series has at most 12 windows open per kind (a sample is folded into
    each of them: the aggregator's per-sample cost). Where gcd(size, grid) would open more,
    the hop is raised to the least multiple of it that is >= size / 12: the windows then close
    less often than at every grid point, never more than 12 at once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import msgspec

from governor.spec_base import PolicyError

if TYPE_CHECKING:  # governor.spec validates with `check_panic` below: no import at run time
    from governor.spec import PanicSpec, ScalingPolicySpec

__all__ = [
    "MAX_OPEN_WINDOWS",
    "MAX_WINDOW_SECONDS",
    "WindowSettings",
    "check_panic",
    "hop_for",
    "sized",
    "window_sizes",
]

MAX_WINDOW_SECONDS = 600.0
MAX_OPEN_WINDOWS = 12


class WindowSettings(msgspec.Struct, kw_only=True):
    """The windows and the throttle (the aggregator's settings extend them)."""

    stable_window_seconds: float = 60.0
    stable_hop_seconds: float = 10.0
    panic_window_seconds: float = 6.0
    panic_hop_seconds: float = 2.0
    # A policy's windows hop by gcd(size, this) (`hop_for`): one closes at every multiple of it.
    hop_grid_seconds: float = 10.0
    allowed_lateness_seconds: float = 2.0
    # How long an open window's estimate may be held back when no window closes. The default
    # panic hop (2 s) closes a window every 2 s, and its message carries the newest estimates:
    # above that hop, a series at a sample a second goes out once per close, not per sample
    # (half the load messages and decider evaluations; at 500 ms it was one per sample). The
    # margin over 2 s keeps the tick from sending the held estimate just before the close does.
    publish_interval_ms: int = 2500
    instant_seconds: float = 1.0  # a per-pod series' instants (governor.pod_totals): the scrape


def hop_for(size: float, grid: float) -> float:
    """The hop of a `size`-second window on a `grid`-second grid, within `MAX_OPEN_WINDOWS`."""
    if size == int(size) and grid == int(grid) and grid >= 1:
        hop = float(math.gcd(int(size), int(grid)))
    else:
        hop = 1.0 if size >= 1 else size
    if size / hop > MAX_OPEN_WINDOWS:
        hop *= math.ceil(size / (MAX_OPEN_WINDOWS * hop))
    return hop


def sized(defaults: WindowSettings, stable: float, panic: float) -> WindowSettings:
    """`defaults` with windows of these sizes, hopping on its grid (`hop_for`)."""
    grid = defaults.hop_grid_seconds
    return msgspec.structs.replace(
        defaults,
        stable_window_seconds=stable,
        stable_hop_seconds=hop_for(stable, grid),
        panic_window_seconds=panic,
        panic_hop_seconds=hop_for(panic, grid),
    )


def window_sizes(policy: ScalingPolicySpec | None, defaults: WindowSettings) -> WindowSettings:
    """The windows of a workload scaled by `policy` (None: it has none): the panic section's
    sizes on the defaults' grid, else the defaults as they are."""
    if policy is None or policy.panic is None:
        return defaults
    p = policy.panic
    return sized(defaults, p.stable_window_seconds, p.window_seconds)


def check_panic(p: PanicSpec) -> None:
    """The panic section's validation (governor.spec), with the window limit."""
    if not 0 < p.window_seconds < p.stable_window_seconds:
        raise PolicyError(
            "panic.windowSeconds",
            "must be > 0 and shorter than spec.panic.stableWindowSeconds",
        )
    if p.stable_window_seconds > MAX_WINDOW_SECONDS:
        raise PolicyError(
            "panic.stableWindowSeconds",
            f"must be <= {MAX_WINDOW_SECONDS:g} (the aggregator's window limit, "
            f"governor.window_sizes.MAX_WINDOW_SECONDS), got {p.stable_window_seconds:g}; "
            f"for a longer memory of high load use "
            f"behavior.scaleDown.stabilizationWindowSeconds",
        )
    if p.threshold_percent <= 100:
        raise PolicyError("panic.thresholdPercent", "must be > 100 (Knative: 200)")
