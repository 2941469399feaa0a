"""`governor scenario SCENARIO.yaml --out DIR`: a pool, its workloads and failures, played with
and without rebalance (and the services alone) through the decider's own code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from governor.entry import Commands
from governor_tools.sim.scenario import ScenarioError, load_scenario, run_scenario
from governor_tools.sim.scenario_report import write_outputs

COLUMNS = (
    "run",
    "workload",
    "tier",
    "violation s",
    "GPU-h",
    "restarts",
    "progress",
    "short s",
    "failed-create replica-s",
    "pending replica-s",
)


def scenario(args: argparse.Namespace) -> int:
    """Simulate a cluster scenario: rebalance vs each workload scaled alone."""
    try:
        spec = load_scenario(args.path)
        result = run_scenario(spec)
    except ScenarioError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    paths = write_outputs(result, spec, args.out)
    table = Table(*COLUMNS)
    for name, run in result.runs.items():
        for wl, s in sorted(run.summary.items()):
            table.add_row(
                name,
                wl,
                str(s.priority),
                str(s.violation_seconds) if s.kind == "service" else "",
                f"{s.gpu_hours:.2f}",
                str(s.restarts),
                f"{s.progress:.0f}" if s.kind == "training" else "",
                str(s.shortfall_seconds),
                str(s.failed_replica_seconds),
                str(s.pending_replica_seconds),
            )
    Console().print(table)
    for kind, p in paths.items():
        print(f"{kind}: {p}")
    return 0


def register(commands: Commands) -> None:
    p = commands.command("scenario", scenario)
    p.add_argument(
        "path", type=Path, metavar="PATH", help="a scenario YAML (see examples/scenarios/)"
    )
    p.add_argument(
        "--out", type=Path, required=True, help="folder for summary.json, CSVs, PNG, HTML"
    )
