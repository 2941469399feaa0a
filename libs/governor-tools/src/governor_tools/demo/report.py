"""The demo's report: what the live stack did per workload, next to the same load replayed
through the simulator (governor's demo policy and the reference HPA), as PNG and HTML.

Live numbers come from timeline.csv (the workload simulator's view, sampled every tick); the
simulator replays each service's segment in trace time with the demo's policy at speed 1 and with
the twin's HPA (hpa_twin.run_sim: the same object, sync period and metric delay as the real one).
Each service's HPA twin (governor_tools.demo.hpa_twin) is the real HPA on the same load, so
`hpa_live` against `hpa_sim` checks the simulator's HPA model on the run itself: `hpa_sim` also
holds `within_1_replica_of_live`, the share of trace seconds the two replica series are at most
one replica apart.

summary.json: `{"<service>": {"governor": {...}, "hpa_live": {...}, "hpa_sim": {...}}}`, each arm
with violation_seconds, replica_hours, scale_events, peak_replicas in trace time (live arms also
peak_need_replicas: ceil(peak 1 s offered load / target per pod), and peak_over_need, their
ratio); the other top-level keys are about the training job's shrinks (`shrinks`), each judged
against the services' need: their count, how many were needed, and `training_shrink_log`, each
shrink (trace_seconds, before, after, need_cpu, free_cpu, needed). `verdict` turns them into the
must-show lines the run prints at its end.
"""

from __future__ import annotations

import base64
import html
import itertools
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from governor.spec import ScalingPolicySpec, policy_from_obj
from governor_tools.demo import hpa_twin
from governor_tools.demo import scenario as sc
from governor_tools.hpa_live import within_one
from governor_tools.sim.replay import Run, SimConfig, Summary
from governor_tools.sim.runs import HPA, policy_evaluate, run_all

if TYPE_CHECKING:
    from governor_tools.demo.run import Demo, Sample

GOVERNOR_SIM = "governor (simulated)"


class LiveSummary(msgspec.Struct, frozen=True):
    violation_seconds: float  # trace seconds with load > ready × C
    unserved_fraction: float
    replica_hours: float  # trace hours
    peak_replicas: int
    scale_events: int = 0  # changes of the spec replicas
    peak_need_replicas: int = 0  # ceil(peak offered load / target per pod)


def sim_config() -> SimConfig:
    return SimConfig(
        capacity_per_replica=sc.CAPACITY_PER_REPLICA,
        startup_seconds=sc.TRACE_WEB_STARTUP,
        target_utilization=sc.TARGET_PER_POD / sc.CAPACITY_PER_REPLICA,
        step_seconds=sc.TRACE_DECISION_STEP,
    )


def sim_policy(s: sc.WebService) -> ScalingPolicySpec:
    """The demo's policy for `s` in trace time, fed the simulator's total-load metric."""
    obj = sc.web_policy(s, sc.TimeScale(1.0))
    obj["spec"]["metrics"] = [  # the simulator feeds one metric: the total offered load
        {"name": "load", "target": {"type": "AverageValue", "averageValue": sc.TARGET_PER_POD}}
    ]
    return policy_from_obj(obj).spec


def live_summary(rows: list[Sample]) -> LiveSummary:
    violation = unserved = total = replica_s = 0.0
    for a, b in itertools.pairwise(rows):
        dt = b.trace_seconds - a.trace_seconds
        served = a.ready * sc.CAPACITY_PER_REPLICA
        total += a.load * dt
        replica_s += a.spec * dt
        if a.load > served:
            violation += dt
            unserved += (a.load - served) * dt
    return LiveSummary(
        violation_seconds=round(violation),
        unserved_fraction=unserved / total if total else 0.0,
        replica_hours=replica_s / 3600,
        peak_replicas=max((r.spec for r in rows), default=0),
        scale_events=sum(a.spec != b.spec for a, b in itertools.pairwise(rows)),
        peak_need_replicas=math.ceil(max((r.load for r in rows), default=0) / sc.TARGET_PER_POD),
    )


class Shrink(msgspec.Struct, frozen=True):
    """The training job asked to shrink: what the services needed at their target then."""

    trace_seconds: float
    before: int
    after: int
    # max over the stable window before it (what the policy could see) of Σ ceil(load / target
    # per pod) × cpu over the services
    need_cpu: float
    free_cpu: float  # the pool's cpu minus the job's before the shrink
    needed: bool  # the services' need exceeded what the job left free


def shrinks(rows: list[Sample]) -> list[Shrink]:
    """Every decrease of the job's spec replicas, judged against the services' need."""
    by_time: dict[float, dict[str, Sample]] = defaultdict(dict)
    for r in rows:
        by_time[r.trace_seconds][r.workload] = r
    pool_cpu = sc.NODES * sc.NODE_CPU
    job, out, window = sc.TRAINING, [], sc.TRACE_STABLE_WINDOW
    moments = [by_time[t] for t in sorted(by_time) if job.workload in by_time[t]]

    def need(m: dict[str, Sample]) -> float:
        return sum(
            math.ceil(m[s.workload].load / sc.TARGET_PER_POD) * s.cpu
            for s in sc.SERVICES
            if s.workload in m
        )

    for i, (a, b) in enumerate(itertools.pairwise(moments)):
        before, after = a[job.workload].spec, b[job.workload].spec
        if after >= before:
            continue
        t = b[job.workload].trace_seconds
        seen = [m for m in moments[: i + 2] if m[job.workload].trace_seconds >= t - window]
        free, needs = pool_cpu - before * job.cpu, max(need(m) for m in seen)
        out.append(Shrink(t, before, after, needs, free, needs > free))
    return out


def shrink_notes(rows: list[Sample]) -> list[str]:
    """When and why the training job shrank (or that it never did)."""
    cuts = shrinks(rows)
    if not cuts:
        return ["training job: never shrank (the services' need at target always fit)"]
    return [_shrink_note(c) for c in cuts]


def _shrink_note(c: Shrink) -> str:
    return (
        f"training job {c.before}→{c.after} workers at trace {c.trace_seconds:.0f} s: the "
        f"services needed up to {c.need_cpu:g} cpu at their target in the stable window before, "
        f"{c.free_cpu:g} free beside the job: "
        + ("needed" if c.needed else "NOT needed by the services' load")
    )


def _arm(summ: LiveSummary | Summary) -> dict[str, float | int]:
    arm: dict[str, float | int] = {
        "violation_seconds": summ.violation_seconds,
        "replica_hours": round(summ.replica_hours, 4),
        "scale_events": summ.scale_events,
        "peak_replicas": summ.peak_replicas,
    }
    if isinstance(summ, LiveSummary):
        arm["peak_need_replicas"] = summ.peak_need_replicas
        if summ.peak_need_replicas:
            arm["peak_over_need"] = round(summ.peak_replicas / summ.peak_need_replicas, 4)
    return arm


def sim_agreement(rows: list[Sample], run: Run) -> float:
    """The share of the live run's trace seconds in which the simulated replicas are within one
    of the live ones (spec replicas both)."""
    if not rows:
        return 0.0
    live = [(r.trace_seconds, r.spec) for r in rows]
    sim = [(r.timestamp, r.replicas_requested) for r in run.rows]
    return within_one(live, sim, rows[0].trace_seconds, rows[-1].trace_seconds, rows[0].spec)


def summary(by_wl: dict[str, list[Sample]], sims: dict[str, dict[str, Run]]) -> dict[str, object]:
    """summary.json's object: per service the three arms; then the job's shrinks, as numbers."""
    out: dict[str, object] = {}
    for s, t in zip(sc.SERVICES, hpa_twin.TWINS, strict=True):
        hpa_sim = _arm(sims[s.name][HPA].summary)
        hpa_sim["within_1_replica_of_live"] = round(
            sim_agreement(by_wl[t.workload], sims[s.name][HPA]), 4
        )
        out[s.name] = {
            "governor": _arm(live_summary(by_wl[s.workload])),
            "hpa_live": _arm(live_summary(by_wl[t.workload])),
            "hpa_sim": hpa_sim,
        }
    cuts = shrinks([r for rows in by_wl.values() for r in rows])
    out["training_shrinks"] = len(cuts)
    out["training_shrinks_needed"] = sum(c.needed for c in cuts)
    out["training_shrink_log"] = msgspec.to_builtins(cuts)
    return out


PEAK_OVER_NEED_MAX = 1.1  # issue 17: peak spec replicas ≤ 1.1 × ceil(peak load / target)


def verdict(by_wl: dict[str, list[Sample]], sims: dict[str, dict[str, Run]]) -> list[str]:
    """The demo's must-show (issue 17), one line per criterion: each governor-managed service's
    peak spec replicas against its need at target and its violations against the simulated
    HPA's; the training job's shrinks against the services' need then."""
    lines = []
    for s in sc.SERVICES:
        gov, hpa = live_summary(by_wl[s.workload]), sims[s.name][HPA].summary
        need = gov.peak_need_replicas
        ratio = gov.peak_replicas / need if need else math.inf
        lines.append(
            f"must-show {s.name}: peak spec replicas {gov.peak_replicas}, need at target"
            f" ceil(peak load / {sc.TARGET_PER_POD:g}) = {need}: {ratio:.2f}×"
            f" ({_met(ratio <= PEAK_OVER_NEED_MAX)}: ≤ {PEAK_OVER_NEED_MAX:g}×); violation"
            f" trace-s {gov.violation_seconds:g} vs simulated HPA {hpa.violation_seconds:g}"
            f" ({_met(gov.violation_seconds < hpa.violation_seconds)}: below)"
        )
    cuts = shrinks([r for rows in by_wl.values() for r in rows])
    needed = sum(c.needed for c in cuts)
    lines.append(
        f"must-show training job: {len(cuts)} shrinks, {needed} while the services' need at"
        f" target exceeded the pool's free cpu ({_met(needed == len(cuts))}: only when needed)"
    )
    return lines + [f"  {_shrink_note(c)}" for c in cuts]


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def write(demo: Demo, out: Path) -> tuple[list[Path], list[str]]:
    """report.png (the live run next to the reference HPA simulated on the same load),
    report.html (the summaries, the pipeline latency, the load's provenance, the image) and
    summary.json; and the must-show's verdict lines (`verdict`)."""
    by_wl: dict[str, list[Sample]] = defaultdict(list)
    for sample in demo.timeline:
        by_wl[sample.workload].append(sample)
    config = sim_config()
    sims: dict[str, dict[str, Run]] = {}
    for s in sc.SERVICES:
        trace = demo.segments[s.name].as_trace(f"{s.name}")
        spec = sim_policy(s)
        runs = run_all(trace, config, {GOVERNOR_SIM: spec}, with_hpa=False)
        runs.append(hpa_twin.run_sim(s, trace, config, policy_evaluate()))
        sims[s.name] = {r.name: r for r in runs}
    png, live_rows = _plot(demo, by_wl, sims, out)
    summary_path = out / "summary.json"
    summary_path.write_text(json.dumps(summary(by_wl, sims), indent=2) + "\n")
    return [png, _page(demo, live_rows, png, out), summary_path], verdict(by_wl, sims)


def _plot(
    demo: Demo,
    by_wl: dict[str, list[Sample]],
    sims: dict[str, dict[str, Run]],
    out: Path,
) -> tuple[Path, list[tuple[str, str, LiveSummary | Summary]]]:
    """One panel per service (load, live and HPA capacity, replicas) and one for the job."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = sc.CAPACITY_PER_REPLICA
    n = len(sc.SERVICES) + 1
    fig, axes = plt.subplots(n, 1, figsize=(12, 3.4 * n), sharex=True, squeeze=False)
    live_rows: list[tuple[str, str, LiveSummary | Summary]] = []
    for ax, s in zip(axes[: len(sc.SERVICES), 0], sc.SERVICES, strict=True):
        rows = by_wl[s.workload]
        minutes = [r.trace_seconds / 60 for r in rows]
        ax.step(minutes, [r.load for r in rows], where="post", lw=1.2, label="offered load (rps)")
        ax.step(
            minutes, [r.ready * c for r in rows], where="post", lw=1.0,
            label="served capacity, live (ready × C)",
        )  # fmt: skip
        twin_rows = by_wl[hpa_twin.twin(s).workload]
        ax.step(
            [r.trace_seconds / 60 for r in twin_rows], [r.ready * c for r in twin_rows],
            where="post", lw=1.0, label="served capacity, HPA twin live (ready × C)",
        )  # fmt: skip
        hpa = sims[s.name][HPA]
        ax.step(
            [row.timestamp / 60 for row in hpa.rows], [row.replicas_ready * c for row in hpa.rows],
            where="post", lw=0.9, ls="--", label="served capacity, HPA twin simulated",
        )  # fmt: skip
        twin = ax.twinx()
        twin.step(
            minutes, [r.spec for r in rows], where="post", lw=0.8, color="tab:gray", alpha=0.8,
            label="replicas (spec), live",
        )  # fmt: skip
        low, high = ax.get_ylim()
        twin.set_ylim(low / c, high / c)
        twin.set_ylabel("replicas")
        ax.set_ylabel("rps")
        live, twin_live = live_summary(rows), live_summary(twin_rows)
        live_rows.append((s.name, "governor (live stack)", live))
        live_rows.append((s.name, "HPA twin (live, real controller)", twin_live))
        for name, run in sims[s.name].items():
            live_rows.append((s.name, name, run.summary))
        ax.set_title(
            f"Deployment/{s.name} (priority {s.priority}): violation trace-s governor "
            f"{live.violation_seconds:g}, HPA live {twin_live.violation_seconds:g}, "
            f"HPA sim {hpa.summary.violation_seconds}",
            fontsize=10,
        )
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = twin.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=7)
    ax = axes[-1, 0]
    job = by_wl[sc.TRAINING.workload]
    minutes = [r.trace_seconds / 60 for r in job]
    ax.step(minutes, [r.spec for r in job], where="post", label="training workers (spec)")
    ax.step(minutes, [r.ready for r in job], where="post", label="training workers (ready)")
    ax.step(minutes, [r.gpus_used for r in job], where="post", ls=":", label="pool GPUs in use")
    ax.set_ylabel("workers / GPUs")
    ax.set_title(f"PyTorchJob/{sc.TRAINING.name}: elastic, floor {sc.TRAINING.floor}", fontsize=10)
    ax.legend(loc="lower left", fontsize=7)
    ax.set_xlabel("trace minutes since the start of the replay")
    fig.suptitle(f"governor demo: {demo.trace.name} at {demo.opts.speed:g}x, live stack vs HPA")
    fig.tight_layout()
    png = out / "report.png"
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png, live_rows


def _page(
    demo: Demo, live_rows: list[tuple[str, str, LiveSummary | Summary]], png: Path, out: Path
) -> Path:
    c = sc.CAPACITY_PER_REPLICA
    columns = ("workload", "run", "violation trace-s", "unserved", "replica-hours", "peak",
               "scale events")  # fmt: skip
    head = "".join(f"<th>{h}</th>" for h in columns)
    body = ""
    for wl, name, summ in live_rows:
        body += (
            f"<tr><td>{html.escape(wl)}</td><td>{html.escape(name)}</td>"
            f"<td>{summ.violation_seconds:g}</td><td>{summ.unserved_fraction:.2%}</td>"
            f"<td>{summ.replica_hours:.2f}</td><td>{summ.peak_replicas}</td>"
            f"<td>{summ.scale_events}</td></tr>"
        )
    lat = sorted(demo.board.latencies)
    pipeline = (
        f"pipeline latency (sample event time to the actuator's patch), {len(lat)} actuations: "
        f"p50 {lat[len(lat) // 2] * 1000:.0f} ms, p95 {lat[int(len(lat) * 0.95)] * 1000:.0f} ms, "
        f"max {lat[-1] * 1000:.0f} ms; {demo.board.decisions} decisions"
        if lat
        else "no actuation recorded"
    )
    notes = [pipeline, *shrink_notes(demo.timeline), *demo.ts.describe()] + [
        f"load {name}: {seg.trace} rows {seg.start}..{seg.start + seg.rows - 1}, mapped to "
        f"{seg.base:g}..{seg.peak:g} rps; C = {c:g} rps per replica, target "
        f"{sc.TARGET_PER_POD:g} rps per replica"
        for name, seg in demo.segments.items()
    ]
    image = base64.b64encode(png.read_bytes()).decode("ascii")
    page = out / "report.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>governor demo</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px}</style></head><body>"
        "<h1>governor demo: the whole stack on real Kafka and a real API server</h1>"
        f"<table><tr>{head}</tr>{body}</table><ul>"
        + "".join(f"<li>{html.escape(n)}</li>" for n in notes)
        + f"</ul><img alt='load, capacity and replicas' src='data:image/png;base64,{image}'>"
        "</body></html>",
        encoding="utf-8",
    )
    return page
