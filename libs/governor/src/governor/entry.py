"""The one command-line shape of every service's console script.

    governor-<service> [--config FILE] [service options]

The file (else the one `<PREFIX>_CONFIG` names), then the `<PREFIX>_*` environment, then the
service's own options fill its typed settings (see governor.settings). A service parses its
command line before it connects to anything, so `--help` prints the usage and exits 0 at once.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
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
