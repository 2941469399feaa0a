"""What the demo shows while it runs: a rich table (live) or one plain line per update."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from rich.console import Group
from rich.table import Table
from rich.text import Text

from governor import events


@dataclass
class Row:
    name: str
    kind: str
    priority: int
    load: float | None  # offered load (services), None for the training job
    target: str
    spec: int = 0
    ready: int = 0
    desired: int | None = None
    reason: str = ""


@dataclass
class Board:
    """The latest of everything the view shows; `on_decision`/`on_actuation` feed it."""

    rows: dict[str, Row] = field(default_factory=dict)  # by workload id
    latencies: list[float] = field(default_factory=list)  # sample -> patch, seconds
    decisions: int = 0
    refused: int = 0
    kubelet_errors: int = 0
    gpus_used: int = 0
    gpus_total: int = 0
    trace_seconds: float = 0.0
    elapsed: float = 0.0
    duration: float = 0.0
    metrics_api: str = "metrics.k8s.io: -"
    _newest: dict[str, float] = field(default_factory=dict)

    def on_decision(self, d: events.ScaleDecision) -> None:
        self.decisions += 1
        self._newest[d.decision_id] = d.newest_input
        row = self.rows.get(d.workload)
        if row is not None:
            row.desired = d.to_replicas
            row.reason = reason_text(d)

    def on_actuation(self, a: events.Actuation) -> None:
        newest = self._newest.pop(a.decision_id, None)
        if a.outcome == "applied" and newest is not None and a.at:
            self.latencies.append(a.at - newest)
        elif a.outcome in ("refused", "failed"):
            self.refused += 1

    def latency_text(self) -> str:
        if not self.latencies:
            return "sample→patch: -"
        recent = self.latencies[-50:]
        p50 = statistics.median(recent)
        worst = max(recent)
        return (
            f"sample→patch p50 {p50 * 1000:.0f} ms, max {worst * 1000:.0f} ms (last {len(recent)})"
        )


def reason_text(d: events.ScaleDecision) -> str:
    if not d.reasons:
        return ""
    parts = []
    for r in d.reasons[-2:]:
        parts.append(f"{r.rule}: {r.detail}" if r.detail else r.rule)
    return "; ".join(parts)


def table(board: Board) -> Group:
    t = Table(
        title=(
            f"governor demo — {board.elapsed:5.0f}/{board.duration:.0f} s, "
            f"trace time {board.trace_seconds / 60:5.1f} min"
        ),
        expand=True,
    )
    widths = {"workload": 20, "prio": 5, "load": 10, "target": 17, "ready/spec": 10, "desired": 7}
    for col, width in widths.items():
        t.add_column(col, no_wrap=True, min_width=width)
    t.add_column("last decision", overflow="fold", ratio=1)
    for row in board.rows.values():
        t.add_row(
            f"{row.kind}/{row.name}",
            str(row.priority),
            "-" if row.load is None else f"{row.load:6.1f} rps",
            row.target,
            f"{row.ready}/{row.spec}",
            "-" if row.desired is None else str(row.desired),
            row.reason,
        )
    foot = Text(
        f"pool GPUs in use {board.gpus_used}/{board.gpus_total}   {board.latency_text()}   "
        f"decisions {board.decisions}, refused/failed {board.refused}, "
        f"simulator API errors {board.kubelet_errors}\n{board.metrics_api}"
        "   Ctrl-C stops"
    )
    return Group(t, foot)


def line(board: Board) -> str:
    cells = []
    for row in board.rows.values():
        load = "" if row.load is None else f" load={row.load:.0f}"
        want = "-" if row.desired is None else str(row.desired)
        cells.append(f"{row.name}:{load} ready/spec={row.ready}/{row.spec} desired={want}")
    return (
        f"[{board.elapsed:4.0f}s trace+{board.trace_seconds:5.0f}s] " + " | ".join(cells)
        + f" | gpus {board.gpus_used}/{board.gpus_total} | {board.latency_text()}"
        + f" | {board.metrics_api}"
    )  # fmt: skip
