"""`governor topics create|describe`: the topics of the contract table, on the broker."""

from __future__ import annotations

import asyncio

import typer

from governor.bus import default_bootstrap
from governor.topics import describe_topics, ensure_topics, render_descriptions

BOOTSTRAP = typer.Option(
    None,
    "--bootstrap",
    help="Kafka bootstrap (default: $GOVERNOR_KAFKA_BOOTSTRAP or 127.0.0.1:9092)",
)


def register(app: typer.Typer) -> None:
    topics = typer.Typer(help="Create and inspect governor's Kafka topics (and their .dlq).")

    @topics.command("create")
    def create(
        bootstrap: str | None = BOOTSTRAP,
        partitions: int | None = typer.Option(None, help="override every topic's partitions"),
    ) -> None:
        """Create every topic of the contract table and its .dlq; idempotent."""
        actions = asyncio.run(
            ensure_topics(bootstrap or default_bootstrap(), partitions=partitions)
        )
        typer.echo("\n".join(actions) if actions else "all topics already as wanted")

    @topics.command("describe")
    def describe(bootstrap: str | None = BOOTSTRAP) -> None:
        """Each topic as the broker has it, against what the table wants."""
        descs = asyncio.run(describe_topics(bootstrap or default_bootstrap()))
        typer.echo(render_descriptions(descs))
        if any(d.problems for d in descs):
            raise typer.Exit(1)

    app.add_typer(topics, name="topics")
