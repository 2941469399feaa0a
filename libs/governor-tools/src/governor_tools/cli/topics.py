"""`governor topics create|describe`: the topics of the contract table, on the broker."""

from __future__ import annotations

import argparse
import asyncio

from governor.bus import default_bootstrap
from governor.entry import Commands
from governor.topics import describe_topics, ensure_topics, render_descriptions
from governor_tools.cli.options import bootstrap_option


def create(args: argparse.Namespace) -> None:
    """Create every topic of the contract table and its .dlq; idempotent."""
    bootstrap = args.bootstrap or default_bootstrap()
    actions = asyncio.run(ensure_topics(bootstrap, partitions=args.partitions))
    print("\n".join(actions) if actions else "all topics already as wanted")


def describe(args: argparse.Namespace) -> int:
    """Each topic as the broker has it, against what the table wants."""
    descs = asyncio.run(describe_topics(args.bootstrap or default_bootstrap()))
    print(render_descriptions(descs))
    return 1 if any(d.problems for d in descs) else 0


def register(commands: Commands) -> None:
    topics = commands.group(
        "topics", "Create and inspect governor's Kafka topics (and their .dlq)."
    )
    p = topics.command("create", create)
    bootstrap_option(p)
    p.add_argument("--partitions", type=int, help="override every topic's partitions")
    bootstrap_option(topics.command("describe", describe))
