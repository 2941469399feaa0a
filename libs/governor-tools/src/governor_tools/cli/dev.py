"""`governor dev kafka|cluster up|down`: the local real components, via the project scripts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import typer

REPO = Path(__file__).resolve().parents[5]
SCRIPTS = {
    "kafka": REPO / "deploy" / "kafka" / "kafka.sh",
    "cluster": REPO / "deploy" / "devcluster" / "devcluster.sh",
}


def _run(component: str, action: str) -> None:
    script = SCRIPTS[component]
    if not script.exists():
        typer.echo(f"{script} not found: run this from a governor source checkout", err=True)
        raise typer.Exit(2)
    raise typer.Exit(subprocess.call(["bash", str(script), action]))


def register(app: typer.Typer) -> None:
    dev = typer.Typer(help="Start and stop the local real components (Kafka, kube-apiserver).")
    kafka = typer.Typer(help="A local single-node Apache Kafka broker (KRaft) on 127.0.0.1.")
    cluster = typer.Typer(help="A local kube-apiserver + etcd built from the official Go modules.")

    for component, sub in (("kafka", kafka), ("cluster", cluster)):
        for action in ("up", "down", "status"):

            def command(component: str = component, action: str = action) -> None:
                _run(component, action)

            sub.command(action, help=f"{action} the local {component}")(command)
        dev.add_typer(sub, name=component)
    app.add_typer(dev, name="dev")
