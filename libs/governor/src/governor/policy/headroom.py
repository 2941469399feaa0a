"""The forecast and event-reduction steps of `evaluate` (scale.py), after panic and before the
stabilization windows: the forecast's floor only raises the count (forecast.py), and a
scale-down waits for the forecast's upper bound and a full step. Both are off in HPA-compatible
mode (spec.hpa_compatible)."""

from __future__ import annotations

import math
from typing import Final

from governor.events import Reason
from governor.policy import forecast as fc
from governor.policy.evaluation import Compiled, Evaluation, ForecastConsts, g4
from governor.policy.types import ScaleState


def forecast(
    ev: Evaluation, state: ScaleState, startup: float | None, step: float
) -> dict[str, fc.ForecastState] | None:
    """Each fresh metric's forecaster fed (forecast.py), its floor and the scale-down gate."""
    loads = ev.loads
    if not loads:
        return state.forecasts
    k = ev.c.forecast_consts.get((startup, step))
    if k is None:
        k = _consts(ev.c, startup, step)
    ev.consts = k
    ev.horizon = k.horizon
    known = state.forecasts
    # A policy's one metric replaces its own entry: no copy of the old dict to update.
    out = {} if known is None or (len(known) == 1 and loads[0][0] in known) else dict(known)
    known = known or {}
    steps, up_q, down_q, half_life = k.steps, k.up_q, k.down_q, k.half_life
    level_half_life, peak, growth = k.level_half_life, k.peak, k.growth
    half, now, ceil = fc.HALF, ev.now, math.ceil
    for name, load in loads:
        fs = fc.observe(
            known.get(name, _FRESH), load, now, step, steps, up_q, down_q, half_life,
            level_half_life, growth,
        )  # fmt: skip
        out[name] = fs
        # fc.upper and fc.replicas_for, inlined (conditionals, not max(): this runs on every
        # evaluation, and they pick the same float max() does).
        bound = (load + half) * fs.up - half
        if not bound > load:
            bound = load
        floor = ceil(bound / peak - 1e-9)
        if floor < 0:
            floor = 0
        if floor > ev.floor:
            ev.floor, ev.floor_load = floor, bound
        gated = (load + half) * fs.down - half
        gate = ceil((gated if gated > load else load) / peak - 1e-9)
        if gate < 0:
            gate = 0
        level = fs.level
        if load < fc.IDLE and load < fc.BURST_COLLAPSE * level:
            held = fc.replicas_for(level)
            if held > gate and held > ev.gate:
                # The load collapsed from a recent burst: hold the (decaying) burst level, so
                # the next burst does not arrive at too few replicas during the start-up.
                ev.gate, ev.burst = held, True
                continue
        if gate > ev.gate:
            ev.gate, ev.burst = gate, False
    return out


def _consts(c: Compiled, startup: float | None, step: float) -> ForecastConsts:
    """The forecast step's constants for this start-up and step, cached on the policy (bounded:
    the learned start-up is a running estimate and can take many values)."""
    f = c.forecast
    assert f is not None
    start = startup if startup is not None else f.startup_seconds
    horizon = f.horizon_seconds if f.horizon_seconds is not None else start + step
    down_q = c.reduce.down_quantile if c.reduce is not None else f.quantile
    note = f" (at {g4(f.peak_percent)} % of the target per replica)"
    k = ForecastConsts(
        horizon=horizon,
        steps=fc.horizon_steps(horizon, step),
        up_q=f.quantile,
        down_q=down_q,
        half_life=f.half_life_seconds,
        # The bounds may load each replica up to peakPercent of the target (the burst level is
        # a memory, not a forecast: it is held at the target).
        peak=f.peak_percent / 100.0,
        growth=2.0 ** (step / f.half_life_seconds),
        unit=c.metrics[0].target if len(c.metrics) == 1 else 1.0,
        level_half_life=start * BURST_MEMORY_STARTUPS,
        floor_text=f"forecast: {_over_next(f.quantile, horizon)} = ",
        floor_note=note if f.peak_percent != 100.0 else "",
    )
    if len(c.forecast_consts) >= 1024:
        c.forecast_consts.clear()
    c.forecast_consts[(startup, step)] = k
    return k


_FRESH: Final = fc.ForecastState()
# The burst level's half-life in start-ups: a burst is remembered over several start-ups, so
# the next one within them finds the replicas still there (azure_llm_code_10s:
# docs/simulation.md; 4 start-ups: twice HPA's violations there).
BURST_MEMORY_STARTUPS: Final = 8.0


def forecast_floor(ev: Evaluation, desired: int) -> int | None:
    """The forecast only raises the count: the floor, when above the reactive count."""
    if ev.floor <= desired:
        return None
    f, r, current = ev.c.forecast, ev.c.reduce, ev.current
    assert f is not None
    if r is not None and desired <= current < ev.floor:
        # Merged small moves: a raise on the forecast alone waits until it is a full step.
        least = max(1, math.ceil(current * r.min_step_percent / 100 - 1e-9))
        if ev.floor - current < least:
            detail = f"forecast asks {ev.floor}: a raise on it alone adds at least {least}"
            ev.reasons.append(Reason(rule="event_reduction", detail=detail))
            return None
    k = ev.consts
    assert k is not None  # the forecast step ran: a floor is set
    detail = f"{k.floor_text}{g4(ev.floor_load * k.unit)} → {ev.floor}{k.floor_note}"
    ev.reasons.append(Reason(rule="forecast", value=ev.floor_load, detail=detail))
    return ev.floor


def _over_next(quantile: float, horizon: float) -> str:
    """ "p90 of load over next 75 s": the quantile and horizon change rarely, so each pair is
    formatted once (float formatting is a visible share of an evaluation), in a cache bounded as
    the horizon follows the learned start-up."""
    key = (quantile, horizon)
    text = _OVER_NEXT.get(key)
    if text is None:
        if len(_OVER_NEXT) >= 4096:
            _OVER_NEXT.clear()
        text = _OVER_NEXT[key] = f"p{g4(quantile * 100)} of load over next {g4(horizon)} s"
    return text


_OVER_NEXT: Final[dict[tuple[float, float], str]] = {}


def event_reduction(ev: Evaluation, desired: int) -> int | None:
    """A scale-down waits until the forecast's upper bound over the horizon is below the new
    count, and removes at least minStepPercent of the replicas (smaller moves merge for at most
    mergeSeconds)."""
    if desired >= ev.current:
        return None  # not a scale-down (most evaluations): _reduce's first test, without a call
    r = ev.c.reduce
    assert r is not None
    return _reduce(ev, desired, r.merge_seconds)


def _reduce(ev: Evaluation, desired: int, merge_seconds: float | None) -> int | None:
    """`event_reduction` with the wait of a move under the step: `merge_seconds` (None: for
    ever)."""
    r, current = ev.c.reduce, ev.current
    assert r is not None
    if desired >= current:
        return None
    allowed = ev.gate if ev.gate > desired else desired
    if allowed > desired and r.gate_seconds is not None and not ev.burst:
        # (a burst level's hold is a memory with its own decay, not bounded by gateSeconds)
        since = ev.now if ev.merged_since is None else ev.merged_since
        if ev.now - since < r.gate_seconds:
            ev.merge_since = since  # the scale-down is pending since then
        else:
            detail = (
                f"scale-down to {desired}: the forecast's gate ({_gate_why(ev)}) held it for"
                f" {g4(ev.now - since)} s (gateSeconds {g4(r.gate_seconds)})"
            )
            ev.reasons.append(Reason(rule="event_reduction", detail=detail))
            allowed = desired
    if allowed >= current:
        detail = f"scale-down to {desired} waits: {_gate_why(ev)}"
        ev.reasons.append(Reason(rule="event_reduction", detail=detail))
        return current
    least = max(1, math.ceil(current * r.min_step_percent / 100 - 1e-9))
    if current - allowed < least:
        since = ev.now if ev.merged_since is None else ev.merged_since
        if merge_seconds is None or ev.now - since < merge_seconds:
            detail = f"scale-down by {current - allowed} merges: a step removes at least {least}"
            if merge_seconds is not None:
                ev.merge_since = since
                detail += f" (or waits {g4(merge_seconds)} s, {g4(ev.now - since)} s so far)"
            ev.reasons.append(Reason(rule="event_reduction", detail=detail))
            return current
        detail = f"scale-down by {current - allowed}: merged for {g4(ev.now - since)} s"
        ev.reasons.append(Reason(rule="event_reduction", detail=detail))
    if allowed != desired:
        detail = f"scale-down to {allowed}, not {desired}: {_gate_why(ev)}"
        ev.reasons.append(Reason(rule="event_reduction", detail=detail))
        return allowed
    return None


def tolerance_merge(ev: Evaluation) -> int | None:
    """HPA's tolerance band holds a count up to 10 % above what the load needs for as long as
    the load stays in it: a hysteresis that costs replica-hours for ever. With bandSeconds the
    count drops to what the metrics ask without the band, under the same forecast gate and step
    rule as any scale-down, a smaller move waiting bandSeconds (not mergeSeconds: releasing the
    band's spare replica is an event HPA never makes on a smooth load)."""
    current, r = ev.current, ev.c.reduce
    assert r is not None
    if r.band_seconds is None:
        return None
    need = max(ev.untolerated, ev.floor, 1)
    if need >= current:
        return None
    held = _reduce(ev, need, r.band_seconds)
    if held is None:  # released whole: a binding rule names itself like every other
        detail = f"tolerance band released: {need}, what the metrics ask without it"
        ev.reasons.append(Reason(rule="event_reduction", detail=detail))
        return need
    return held


def _gate_why(ev: Evaluation) -> str:
    if ev.burst:
        return f"the load fell from a recent burst; its decaying level needs {ev.gate}"
    r = ev.c.reduce
    assert r is not None
    return f"{_over_next(r.down_quantile, ev.horizon)} needs {ev.gate}"
