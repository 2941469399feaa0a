"""Options more than one `governor` command takes, spelled once."""

from __future__ import annotations

import argparse

BOOTSTRAP_HELP = "Kafka bootstrap (default: $GOVERNOR_KAFKA_BOOTSTRAP or 127.0.0.1:9092)"


def bootstrap_option(p: argparse.ArgumentParser, help: str = BOOTSTRAP_HELP) -> None:
    p.add_argument("--bootstrap", help=help)
