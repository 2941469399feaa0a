"""The `governor` command line. Each area lives in its own module and registers its commands."""

from __future__ import annotations

import typer

from governor_tools.cli import (
    ab,
    cluster,
    demo,
    dev,
    explain,
    importer,
    policies,
    scenario,
    schema,
    sim,
    topics,
)

app = typer.Typer(
    name="governor",
    help="governor: an event-driven autoscaler for Kubernetes over Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

for module in (ab, cluster, demo, dev, explain, importer, policies, scenario, schema, sim, topics):
    module.register(app)
