"""`governor schema export DIR`: each topic's JSON Schema, for the teams that subscribe."""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec

from governor.entry import Commands
from governor.schemas import json_schemas


def export(args: argparse.Namespace) -> None:
    """Write one JSON Schema file per topic."""
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    for topic, doc in json_schemas().items():
        path = out / f"{topic}.schema.json"
        path.write_bytes(msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n")
        print(path)


def register(commands: Commands) -> None:
    schema = commands.group("schema", "The topics' contract as JSON Schema.")
    p = schema.command("export", export)
    p.add_argument("out", type=Path, metavar="OUT", help="folder to write <topic>.schema.json into")
