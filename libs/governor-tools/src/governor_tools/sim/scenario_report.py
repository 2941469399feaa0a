"""A scenario's outputs: summary.json, rows.csv per run, the side-by-side plot (PNG) and HTML."""

from __future__ import annotations

import base64
import csv
import html
from pathlib import Path
from typing import Any

import msgspec

from governor_tools.sim.scenario import RunResult, ScenarioResult, ScenarioSpec

RUN_TITLES = {
    "rebalance": "rebalance (stage 2: priorities, damping)",
    "no-rebalance": "no rebalance (each workload alone, pending pods)",
    "alone": "services alone on the empty pool",
}

# The lower panel's lines per workload: the row's column (ready, requested), label and style.
_REPLICA_STEPS: tuple[tuple[int, str, dict[str, Any]], ...] = (
    (4, "ready", {"lw": 1.5}),
    (2, "requested", {"ls": "--", "lw": 0.8}),
)


def summary_json(result: ScenarioResult) -> bytes:
    return msgspec.json.format(
        msgspec.json.encode(
            {
                "scenario": result.scenario,
                "failures": result.failures,
                "runs": {n: r.summary for n, r in result.runs.items()},
                "shortfalls": {n: r.shortfalls for n, r in result.runs.items()},
            }
        )
    )


def write_rows(run: RunResult, path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t", "workload", "load", "requested", "bound", "ready", "restarts"])
        for r in run.rows:
            w.writerow([r.t, r.workload, r.load, r.requested, r.bound, r.ready, r.restarts])


def plot(result: ScenarioResult, spec: ScenarioSpec, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("rebalance", "no-rebalance") if n in result.runs]
    services = {w.name: w for w in spec.workloads if w.kind == "service"}
    palette = ["tab:blue", "tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:cyan"]
    color = {w.name: palette[i % len(palette)] for i, w in enumerate(spec.workloads)}
    fig, axes = plt.subplots(2, len(names), figsize=(7 * len(names), 8), sharex=True, squeeze=False)
    for col, name in enumerate(names):
        run = result.runs[name]
        by: dict[str, list[tuple[float, float, int, int, int]]] = {}
        for r in run.rows:
            by.setdefault(r.workload, []).append((r.t, r.load, r.requested, r.bound, r.ready))
        top, bottom = axes[0][col], axes[1][col]
        for wl, rows in sorted(by.items()):
            short = wl.rsplit("/", 1)[-1]
            ts = [r[0] for r in rows]
            if short in services:
                c = services[short].capacity_per_replica
                top.plot(ts, [r[1] for r in rows], label=f"{short} load", color="black", lw=1)
                top.plot(
                    ts,
                    [r[4] * c for r in rows],
                    label=f"{short} ready × capacity",
                    lw=1.5,
                    color=color.get(short),
                )
            for col, what, style in _REPLICA_STEPS:
                bottom.step(
                    ts,
                    [r[col] for r in rows],
                    where="post",
                    label=f"{short} {what}",
                    color=color.get(short),
                    **style,
                )
        if "alone" in result.runs and name == "rebalance":
            for wl, rows2 in sorted(_ready(result.runs["alone"]).items()):
                short = wl.rsplit("/", 1)[-1]
                c = services[short].capacity_per_replica if short in services else 1.0
                top.plot(
                    [r[0] for r in rows2],
                    [r[1] * c for r in rows2],
                    ls=":",
                    color="gray",
                    lw=1.2,
                    label=f"{short} alone: ready × capacity",
                )
        _mark_failures(result, top, bottom)
        top.set_title(_title(name, run), fontsize=9)
        top.set_ylabel("load / served capacity")
        bottom.set_ylabel("replicas")
        bottom.set_xlabel("seconds")
        top.legend(fontsize=7, loc="upper right")
        bottom.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"scenario {result.scenario}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mark_failures(result: ScenarioResult, top: Any, bottom: Any) -> None:
    """A red line at each node failure on both panels, named on the bottom one."""
    for at, node, kind in result.failures:
        for ax in (top, bottom):
            ax.axvline(at, color="red", ls=":", lw=1)
        bottom.annotate(
            f"{node} {kind}",
            (at, 0.02),
            xycoords=bottom.get_xaxis_transform(),
            rotation=90,
            fontsize=7,
            color="red",
            va="bottom",
            ha="right",
        )


def _title(name: str, run: RunResult) -> str:
    lines = []
    for wl, sm in sorted(run.summary.items()):
        short = wl.rsplit("/", 1)[-1]
        if sm.kind == "service":
            lines.append(f"{short}: {sm.violation_seconds}s violation")
        else:
            lines.append(f"{short}: {sm.restarts} restarts, progress {sm.progress:.0f}")
    return f"{RUN_TITLES.get(name, name)}\n" + "; ".join(lines)


def _ready(run: RunResult) -> dict[str, list[tuple[float, int]]]:
    out: dict[str, list[tuple[float, int]]] = {}
    for r in run.rows:
        out.setdefault(r.workload, []).append((r.t, r.ready))
    return out


def write_html(result: ScenarioResult, png: Path, path: Path) -> None:
    img = base64.b64encode(png.read_bytes()).decode()
    head = (
        "<tr><th>run</th><th>workload</th><th>tier</th><th>violation s</th><th>unserved</th>"
        "<th>GPU-hours</th><th>restarts</th><th>progress</th><th>restart loss</th>"
        "<th>short s</th><th>peak</th><th>decisions</th>"
        "<th>failed-create replica-s</th><th>pending replica-s</th></tr>"
    )
    rows = []
    for name, run in result.runs.items():
        for wl, s in sorted(run.summary.items()):
            rows.append(
                "<tr>"
                + "".join(
                    f"<td>{html.escape(str(v))}</td>"
                    for v in (
                        name,
                        wl,
                        s.priority,
                        s.violation_seconds if s.kind == "service" else "",
                        f"{s.unserved_fraction:.2%}" if s.kind == "service" else "",
                        f"{s.gpu_hours:.2f}",
                        s.restarts,
                        f"{s.progress:.0f}" if s.kind == "training" else "",
                        f"{s.restart_loss:.0f}" if s.kind == "training" else "",
                        s.shortfall_seconds,
                        s.peak_replicas,
                        s.decisions,
                        s.failed_replica_seconds,
                        s.pending_replica_seconds,
                    )
                )
                + "</tr>"
            )
    shortfalls = "".join(
        f"<li>{html.escape(name)} t={t:g}s {html.escape(w)} {g}/{want}: {html.escape(why)}</li>"
        for name, run in result.runs.items()
        for t, w, want, g, why in run.shortfalls
    )
    path.write_text(
        "<!doctype html><meta charset='utf-8'>"
        f"<title>governor scenario {html.escape(result.scenario)}</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
        "</style>"
        f"<h1>scenario {html.escape(result.scenario)}</h1>"
        f"<table>{head}{''.join(rows)}</table>"
        f"<p><img src='data:image/png;base64,{img}' style='max-width:100%'></p>"
        f"<h2>shortfalls published</h2><ul>{shortfalls}</ul>",
        "utf-8",
    )


def write_outputs(result: ScenarioResult, spec: ScenarioSpec, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "summary": out / "summary.json",
        "plot": out / "scenario.png",
        "html": out / "report.html",
    }
    paths["summary"].write_bytes(summary_json(result))
    for name, run in result.runs.items():
        write_rows(run, out / f"rows-{name}.csv")
    plot(result, spec, paths["plot"])
    write_html(result, paths["plot"], paths["html"])
    return paths
