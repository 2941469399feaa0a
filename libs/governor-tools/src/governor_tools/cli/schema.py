"""`governor schema export DIR`: each topic's JSON Schema, for the teams that subscribe."""

from __future__ import annotations

from pathlib import Path

import msgspec
import typer

from governor.schemas import json_schemas


def register(app: typer.Typer) -> None:
    schema = typer.Typer(help="The topics' contract as JSON Schema.")

    @schema.command("export")
    def export(
        out: Path = typer.Argument(..., help="folder to write <topic>.schema.json into"),
    ) -> None:
        """Write one JSON Schema file per topic."""
        out.mkdir(parents=True, exist_ok=True)
        for topic, doc in json_schemas().items():
            path = out / f"{topic}.schema.json"
            path.write_bytes(msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n")
            typer.echo(str(path))

    app.add_typer(schema, name="schema")
