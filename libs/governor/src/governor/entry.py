"""The one command-line shape of every console script: argparse, one parser per program.

    governor-<service> [--config FILE] [service options]
    governor COMMAND [SUBCOMMAND] [options]

The file (else the one `<PREFIX>_CONFIG` names), then the `<PREFIX>_*` environment, then the
service's own options fill its typed settings (see governor.settings). A service parses its
command line before it connects to anything, so `--help` prints the usage and exits 0 at once.
A multi-command tool (the `governor` CLI) is the same parser with `Commands` under it: each
command group's module registers its subcommands, each subcommand a `run(args)` function.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from governor.settings import ConfigError, load_settings

T = TypeVar("T")
# A command's body: its parsed arguments in, its exit status out (None is 0).
Run = Callable[[argparse.Namespace], int | None]


def program_parser(
    prog: str, doc: str | None, epilog: str | None = None
) -> argparse.ArgumentParser:
    """The parser every console script starts from: `doc` as written (paragraphs kept)."""
    return argparse.ArgumentParser(
        prog=prog,
        description=inspect.cleandoc(doc) if doc else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=epilog,
    )


def service_parser(prog: str, doc: str | None, prefix: str) -> argparse.ArgumentParser:
    """`prog`'s parser: its module doc as the description and the shared `--config` option."""
    parser = program_parser(
        prog,
        doc,
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


class CommandError(Exception):
    """A command's input is wrong: a usage error (exit 2) naming `param` and saying the fix."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _summary(doc: str) -> str:
    """A command's line in its group's list: its doc's first sentence (argparse %-formats it)."""
    first = inspect.cleandoc(doc).split("\n\n")[0].replace("\n", " ")
    return first.split(". ")[0].rstrip(".").replace("%", "%%")


class Commands:
    """The subcommands under a parser: a command (`command`) or a group of them (`group`)."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser
        # A group named without a subcommand prints its own help (run stays None).
        parser.set_defaults(run=None, command_parser=parser)
        self._subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
        self.children: dict[str, Commands | None] = {}

    def _add(self, name: str, doc: str) -> argparse.ArgumentParser:
        return self._subparsers.add_parser(
            name,
            help=_summary(doc),
            description=inspect.cleandoc(doc),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    def command(self, name: str, run: Run, doc: str | None = None) -> argparse.ArgumentParser:
        """Add `name`, which runs `run(args)`; its help is `doc` (else `run`'s docstring)."""
        sub = self._add(name, doc or run.__doc__ or name)
        sub.set_defaults(run=run, command_parser=sub)
        self.children[name] = None
        return sub

    def group(self, name: str, doc: str) -> Commands:
        """Add the command group `name`; register its subcommands on what this returns."""
        group = Commands(self._add(name, doc))
        self.children[name] = group
        return group

    def paths(self) -> list[list[str]]:
        """Every command's words below this parser, groups first then their subcommands."""
        found: list[list[str]] = []
        for name, group in self.children.items():
            found.append([name])
            found += [[name, *words] for words in (group.paths() if group else [])]
        return found


def command_parser(
    prog: str, doc: str, registers: Sequence[Callable[[Commands], None]]
) -> Commands:
    """A multi-command tool's parser: each of `registers` adds its commands."""
    commands = Commands(program_parser(prog, doc))
    for register in registers:
        register(commands)
    return commands


def run_command(args: argparse.Namespace) -> int:
    """Run the command `args` names; its CommandError is a usage error (exit 2)."""
    parser: argparse.ArgumentParser = args.command_parser
    if args.run is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.run(args) or 0
    except CommandError as err:
        parser.error(f"argument {err.param}: {err}" if err.param else str(err))


def command_main(
    prog: str, doc: str, registers: Sequence[Callable[[Commands], None]]
) -> Callable[[list[str] | None], int]:
    """A multi-command tool's console script: parse, run the command, return its exit status."""

    def main(argv: list[str] | None = None) -> int:
        args = command_parser(prog, doc, registers).parser.parse_args(argv)
        return run_command(args)

    return main
