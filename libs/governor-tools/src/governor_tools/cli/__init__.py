"""The `governor` command line. Each area lives in its own module and registers its commands on
the one parser shape every console script shares (governor.entry)."""

from __future__ import annotations

from governor.entry import Commands, command_main, command_parser
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

PROG = "governor"
DOC = "governor: an event-driven autoscaler for Kubernetes over Kafka."
REGISTERS = tuple(
    m.register
    for m in (ab, cluster, demo, dev, explain, importer, policies, scenario, schema, sim, topics)
)


def parser() -> Commands:
    """The whole command tree (the tests walk it: every command answers --help)."""
    return command_parser(PROG, DOC, REGISTERS)


main = command_main(PROG, DOC, REGISTERS)
