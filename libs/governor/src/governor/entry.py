"""The one command-line shape of every service's console script.

    governor-<service> [--config FILE] [service options]

The file (else the one `<PREFIX>_CONFIG` names), then the `<PREFIX>_*` environment, then the
service's own options fill its typed settings (see governor.settings). A service parses its
command line before it connects to anything, so `--help` prints the usage and exits 0 at once.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from governor.settings import ConfigError, load_settings

T = TypeVar("T")


def service_parser(prog: str, doc: str | None, prefix: str) -> argparse.ArgumentParser:
    """`prog`'s parser: its module doc as the description and the shared `--config` option."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            f"Settings: defaults, then the YAML/JSON file of --config or ${prefix}_CONFIG, then "
            f"the environment {prefix}_<FIELD> (upper-case, nested fields joined with __)."
        ),
    )
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help=f"YAML/JSON settings (else ${prefix}_CONFIG)"
    )
    return parser


def service_settings(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    cls: type[T],
    prefix: str,
    overrides: Mapping[str, Any] | None = None,
) -> T:
    """The settings of `cls` for `args`; a bad value exits 2 with the field's path."""
    try:
        settings = load_settings(cls, prefix, file=args.config)
        if not overrides:
            return settings
        merged = {**msgspec.structs.asdict(settings), **overrides}  # type: ignore[arg-type]
        return msgspec.convert(merged, cls)
    except (ConfigError, msgspec.ValidationError) as err:
        parser.exit(2, f"{parser.prog}: {err}\n")


def service_main(
    prog: str,
    doc: str | None,
    prefix: str,
    service: str,
    options: Callable[[argparse.ArgumentParser], None] | None = None,
) -> Callable[[list[str] | None], None]:
    """A console script's `main`: parse the command line, then import the module `service` and
    call its `start(parser, args)`.

    The import comes after the parse: a service's module loads the Kafka and Kubernetes clients
    (seconds on a busy machine), and `--help` answers at once without them.
    """

    def main(argv: list[str] | None = None) -> None:
        parser = service_parser(prog, doc, prefix)
        if options is not None:
            options(parser)
        args = parser.parse_args(argv)
        importlib.import_module(service).start(parser, args)

    return main
