"""governor's predictive sections of a ScalingPolicy: `forecast` and `eventReduction`.

Both change a decision HPA would make from the same inputs, so `spec.hpa_compatible` switches
them off (`enabled: false`); the policy steps are policy/headroom.py and policy/forecast.py.
"""

from __future__ import annotations

from governor.spec_base import PolicyError, Spec


class ForecastSpec(Spec):
    """Predictive headroom: a floor from a quantile of the load's growth over the next start-up
    + decision step. It only raises the count, never lowers it."""

    enabled: bool = True
    # Which quantile of the recent growth over the horizon the floor covers.
    quantile: float = 0.9
    # The horizon; None: the target's learned start-up (p90) plus one decision step.
    horizon_seconds: float | None = None
    # The start-up assumed until one is learned from the target's pods.
    startup_seconds: float = 60.0
    # Half-life of the growth history: older samples weigh half after this long.
    half_life_seconds: float = 21600.0
    # The load per replica the forecast's bound may reach, in percent of the metric's target:
    # the target keeps headroom for what the reactive step cannot see coming; the forecast's
    # quantile IS that headroom, so its bound may use some of the target's (100: none; with a
    # target at 70 % of a replica's capacity, 143 fills a replica).
    peak_percent: float = 100.0

    def __post_init__(self) -> None:
        if not 100 <= self.peak_percent <= 1000:
            raise PolicyError("peakPercent", f"must be in [100, 1000], got {self.peak_percent}")
        if not 0 < self.quantile < 1:
            raise PolicyError("quantile", f"must be in (0, 1), got {self.quantile}")
        if self.horizon_seconds is not None and self.horizon_seconds <= 0:
            raise PolicyError("horizonSeconds", "must be > 0")
        if self.startup_seconds < 0 or self.half_life_seconds <= 0:
            raise PolicyError("startupSeconds", "startupSeconds >= 0 and halfLifeSeconds > 0")


class EventReductionSpec(Spec):
    """Fewer scale events: a scale-down waits until the forecast's upper bound over the
    scale-down horizon is below the new count, and small moves merge."""

    enabled: bool = True
    # The upper bound a scale-down must clear: this quantile of growth over the horizon.
    down_quantile: float = 0.99
    # A move removes (or, on the forecast alone, adds) at least this share of the replicas.
    min_step_percent: float = 10.0
    # A smaller scale-down merges with the next ones for at most this long, then happens.
    # None: it waits for ever (fewer scale events, more replica-hours: docs/simulation.md).
    merge_seconds: float | None = None
    # HPA's tolerance band holds a count above what the metrics ask without it for at most this
    # long, then the count drops to that (under the gate and the merge rule). Apart from
    # mergeSeconds: releasing the band's spare replica is an event HPA never makes on a smooth
    # load, so bounding it costs events there (docs/simulation.md). None: the band holds.
    band_seconds: float | None = None
    # The forecast's gate holds a scale-down for at most this long, then lets it through (the
    # reason says so). It keeps a fat-tailed growth history from holding replicas for ever;
    # with HPA's 300 s a scale-down is never later than HPA's window would make it, and sooner
    # when the forecast allows. None: the gate holds for as long as the forecast asks.
    gate_seconds: float | None = None

    def __post_init__(self) -> None:
        if not 0 < self.down_quantile < 1:
            raise PolicyError("downQuantile", "must be in (0, 1)")
        if not 0 <= self.min_step_percent < 100:
            raise PolicyError("minStepPercent", "must be in [0, 100)")
        if self.merge_seconds is not None and self.merge_seconds < 0:
            raise PolicyError("mergeSeconds", "must be >= 0")
        if self.band_seconds is not None and self.band_seconds < 0:
            raise PolicyError("bandSeconds", "must be >= 0")
        if self.gate_seconds is not None and self.gate_seconds < 0:
            raise PolicyError("gateSeconds", "must be >= 0")
