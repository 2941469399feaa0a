"""`governor demo`: the whole stack on one machine (Kafka, a real API server, every service),
replaying real traces time-compressed; live view, then an HTML/PNG report."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        duration: float = typer.Option(180.0, "--duration", help="seconds of load replay"),
        speed: float = typer.Option(
            10.0, "--speed", help="trace-seconds replayed per second (windows scale with it)"
        ),
        trace: str = typer.Option(
            "alibaba-2018-cpu", "--trace", help="a built-in trace (see `governor traces`)"
        ),
        headless: bool = typer.Option(False, "--headless", help="plain progress lines"),
        out: Path = typer.Option(Path("out/demo-stack"), "--out", help="logs, timeline, report"),
    ) -> None:
        """Run governor end to end on local Kafka and kube-apiserver with simulated workloads."""
        from governor_tools.demo.run import Options, run

        raise typer.Exit(
            run(Options(duration=duration, speed=speed, trace=trace, headless=headless, out=out))
        )
