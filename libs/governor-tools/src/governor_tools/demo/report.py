"""The demo's report: what the live stack did per workload, next to the same load replayed
through the simulator (governor's demo policy and the reference HPA), as PNG and HTML.

Live numbers come from timeline.csv (the workload simulator's view, sampled every tick); the
simulator replays each service's segment in trace time with the demo's policy at speed 1 and with
the reference HPA (governor.sim.runs), so the two columns answer "what would HPA have done".
"""

from __future__ import annotations

import base64
import html
import itertools
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from governor.spec import ScalingPolicySpec, policy_from_obj
from governor_tools.demo import scenario as sc
from governor_tools.sim.replay import Run, SimConfig, Summary
from governor_tools.sim.runs import HPA, run_all

if TYPE_CHECKING:
    from governor_tools.demo.run import Demo, Sample

GOVERNOR_SIM = "governor (simulated)"


class LiveSummary(msgspec.Struct, frozen=True):
    violation_seconds: float  # trace seconds with load > ready × C
    unserved_fraction: float
    replica_hours: float  # trace hours
    peak_replicas: int


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
    )


def write(demo: Demo, out: Path) -> list[Path]:
    """report.png (the live run next to the reference HPA simulated on the same load) and
    report.html (the summaries, the pipeline latency, the load's provenance, the image)."""
    by_wl: dict[str, list[Sample]] = defaultdict(list)
    for sample in demo.timeline:
        by_wl[sample.workload].append(sample)
    config = sim_config()
    sims: dict[str, dict[str, Run]] = {}
    for s in sc.SERVICES:
        trace = demo.segments[s.name].as_trace(f"{s.name}")
        spec = sim_policy(s)
        runs = run_all(trace, config, {GOVERNOR_SIM: spec}, with_hpa=True)
        sims[s.name] = {r.name: r for r in runs}
    png, live_rows = _plot(demo, by_wl, sims, out)
    return [png, _page(demo, live_rows, png, out)]


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
        hpa = sims[s.name][HPA]
        ax.step(
            [row.timestamp / 60 for row in hpa.rows], [row.replicas_ready * c for row in hpa.rows],
            where="post", lw=0.9, ls="--", label="served capacity, reference HPA (simulated)",
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
        live = live_summary(rows)
        live_rows.append((s.name, "governor (live stack)", live))
        for name, run in sims[s.name].items():
            live_rows.append((s.name, name, run.summary))
        ax.set_title(
            f"Deployment/{s.name} (priority {s.priority}): live {live.violation_seconds:g} "
            f"violation trace-s vs HPA (sim) {hpa.summary.violation_seconds}",
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
    head = "".join(
        f"<th>{h}</th>"
        for h in ("workload", "run", "violation trace-s", "unserved", "replica-hours", "peak")
    )
    body = ""
    for wl, name, summ in live_rows:
        body += (
            f"<tr><td>{html.escape(wl)}</td><td>{html.escape(name)}</td>"
            f"<td>{summ.violation_seconds:g}</td><td>{summ.unserved_fraction:.2%}</td>"
            f"<td>{summ.replica_hours:.2f}</td><td>{summ.peak_replicas}</td></tr>"
        )
    lat = sorted(demo.board.latencies)
    pipeline = (
        f"pipeline latency (sample event time to the actuator's patch), {len(lat)} actuations: "
        f"p50 {lat[len(lat) // 2] * 1000:.0f} ms, p95 {lat[int(len(lat) * 0.95)] * 1000:.0f} ms, "
        f"max {lat[-1] * 1000:.0f} ms; {demo.board.decisions} decisions"
        if lat
        else "no actuation recorded"
    )
    notes = [pipeline, *demo.ts.describe()] + [
        f"load {name}: {seg.trace} rows {seg.start}..{seg.start + seg.rows - 1}, mapped to "
        f"{seg.base:g}..{seg.peak:g} rps; C = {c:g} rps per replica, target "
        f"{sc.TARGET_PER_POD:g} rps per ready pod"
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
