"""`governor dev kafka|cluster up|down`: the local real components, via the project scripts."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from governor.entry import Commands

REPO = Path(__file__).resolve().parents[5]
SCRIPTS = {
    "kafka": REPO / "deploy" / "kafka" / "kafka.sh",
    "cluster": REPO / "deploy" / "devcluster" / "devcluster.sh",
}
GROUPS = {
    "kafka": "A local single-node Apache Kafka broker (KRaft) on 127.0.0.1.",
    "cluster": "A local kube-apiserver + etcd built from the official Go modules.",
}


def _run(args: argparse.Namespace) -> int:
    script = SCRIPTS[args.component]
    if not script.exists():
        print(f"{script} not found: run this from a governor source checkout", file=sys.stderr)
        return 2
    return subprocess.call(["bash", str(script), args.action])


def register(commands: Commands) -> None:
    dev = commands.group("dev", "Start and stop the local real components (Kafka, kube-apiserver).")
    for component, doc in GROUPS.items():
        group = dev.group(component, doc)
        for action in ("up", "down", "status"):
            p = group.command(action, _run, f"{action} the local {component}")
            p.set_defaults(component=component, action=action)
