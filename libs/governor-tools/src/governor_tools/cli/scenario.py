"""`governor scenario SCENARIO.yaml --out DIR`: a pool, its workloads and failures, played with
and without rebalance (and the services alone) through the decider's own code."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from governor_tools.sim.scenario import ScenarioError, load_scenario, run_scenario
from governor_tools.sim.scenario_report import write_outputs


def register(app: typer.Typer) -> None:
    @app.command("scenario")
    def scenario(
        path: Path = typer.Argument(..., help="a scenario YAML (see examples/scenarios/)"),
        out: Path = typer.Option(..., "--out", help="folder for summary.json, CSVs, PNG, HTML"),
    ) -> None:
        """Simulate a cluster scenario: rebalance vs each workload scaled alone."""
        try:
            spec = load_scenario(path)
            result = run_scenario(spec)
        except ScenarioError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(2) from None
        paths = write_outputs(result, spec, out)
        table = Table(
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
            typer.echo(f"{kind}: {p}")
