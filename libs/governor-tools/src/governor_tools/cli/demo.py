"""`governor demo`: the whole stack on one machine (Kafka, a real API server, every service),
replaying real traces time-compressed; live view, then an HTML/PNG report."""

from __future__ import annotations

import argparse
from pathlib import Path

from governor.entry import Commands


def demo(args: argparse.Namespace) -> int:
    """Run governor end to end on local Kafka and kube-apiserver with simulated workloads."""
    import msgspec

    from governor_tools.demo.run import Options, run

    # Each option is named after the Options field it sets.
    return run(Options(**{f.name: getattr(args, f.name) for f in msgspec.structs.fields(Options)}))


def register(commands: Commands) -> None:
    p = commands.command("demo", demo)
    p.add_argument(
        "--duration", type=float, default=180.0, help="seconds of load replay (default: 180)"
    )
    p.add_argument(
        "--speed",
        type=float,
        default=10.0,
        help="trace-seconds replayed per second (windows scale with it) (default: 10)",
    )
    p.add_argument(
        "--trace",
        default="alibaba-2018-cpu",
        help="a built-in trace (see `governor traces`) (default: %(default)s)",
    )
    p.add_argument("--headless", action="store_true", help="plain progress lines")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("out/demo-stack"),
        help="logs, timeline, report (default: %(default)s)",
    )
