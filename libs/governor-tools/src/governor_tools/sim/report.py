"""Simulation output files: per-step CSVs, summary.json, a PNG chart and an HTML report."""

from __future__ import annotations

import base64
import csv
import html
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

from governor_tools.sim.replay import Run, SimConfig, Summary
from governor_tools.sim.traces import Trace

ROW_HEADER = ("timestamp", "load", "replicas_requested", "replicas_ready")
SUMMARY_COLUMNS = (
    "violation_seconds",
    "unserved_fraction",
    "replica_hours",
    "scale_events",
    "peak_replicas",
    "oracle_gap_closed",
)


def number(x: float) -> str:
    """Exact and readable: whole numbers without a decimal point, others as repr (round-trips)."""
    return str(int(x)) if x.is_integer() else repr(x)


def write_rows(run: Run, path: Path) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(ROW_HEADER)
        for r in run.rows:
            out.writerow(
                [number(r.timestamp), number(r.load), r.replicas_requested, r.replicas_ready]
            )


def write_summary(summaries: Mapping[str, Summary], path: Path) -> None:
    path.write_bytes(msgspec.json.format(msgspec.json.encode(dict(summaries)), indent=2) + b"\n")


def table_rows(summaries: Mapping[str, Summary]) -> list[list[str]]:
    rows = []
    for name, s in summaries.items():
        rows.append(
            [
                name,
                str(s.violation_seconds),
                f"{s.unserved_fraction:.4%}",
                f"{s.replica_hours:.1f}",
                str(s.scale_events),
                str(s.peak_replicas),
                "" if s.oracle_gap_closed is None else f"{s.oracle_gap_closed:.2f}",
            ]
        )
    return rows


def chart(runs: Sequence[Run], trace: Trace, config: SimConfig, title: str, path: Path) -> None:
    """One panel per policy: the trace's load and the served capacity (left), replicas (right).

    The right axis is the left one divided by C, so requested replicas and served capacity are
    drawn to the same scale and the gap between them is the replicas still starting.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(runs), 1, figsize=(12, 3.2 * len(runs)), sharex=True, sharey=True, squeeze=False
    )
    t0 = trace.start
    trace_hours = [(t - t0) / 3600 for t in [*trace.timestamps, trace.end]]
    trace_load = [*trace.values, trace.values[-1]]
    c = config.capacity_per_replica
    twins = []
    for ax, run in zip(axes[:, 0], runs, strict=True):
        hours = [(r.timestamp - t0) / 3600 for r in run.rows]
        ax.step(trace_hours, trace_load, where="post", lw=0.8, label="offered load")
        ax.step(
            hours,
            [r.replicas_ready * c for r in run.rows],
            where="post",
            lw=0.8,
            label="served capacity (ready × C)",
        )
        ax.set_ylabel("load")
        twin = ax.twinx()
        twin.step(
            hours,
            [r.replicas_requested for r in run.rows],
            where="post",
            lw=0.6,
            color="tab:gray",
            alpha=0.7,
            label="replicas requested",
        )
        twin.set_ylabel("replicas")
        twins.append(twin)
        s = run.summary
        ax.set_title(
            f"{run.name}: {s.violation_seconds} violation s, {s.replica_hours:.1f} replica-h, "
            f"{s.scale_events} scale events",
            fontsize=10,
        )
        lines = ax.get_legend_handles_labels()
        more = twin.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    low, high = axes[0, 0].get_ylim()  # shared by every panel once all are drawn
    for twin in twins:
        twin.set_ylim(low / c, high / c)
    axes[-1, 0].set_xlabel("hours since the trace start")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_html(
    summaries: Mapping[str, Summary],
    png: Path,
    path: Path,
    title: str,
    config: SimConfig,
    notes: Sequence[str] = (),
) -> None:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ("policy", *SUMMARY_COLUMNS))
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in table_rows(summaries)
    )
    image = base64.b64encode(png.read_bytes()).decode("ascii")
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    path.write_text(
        f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>capacity per replica C = {config.capacity_per_replica:g}, start-up {config.startup_seconds:g} s,
target utilization {config.target_utilization:g}, decision step {config.step_seconds:g} s.</p>
<table><tr>{head}</tr>{body}</table>
<ul>{items}</ul>
<img alt="load, served capacity and replicas over time" src="data:image/png;base64,{image}">
</body></html>
""",
        encoding="utf-8",
    )
