"""The `governor` CLI run in-process as a user meets it: exit status, stdout and stderr."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from governor_tools.cli import main


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def output(self) -> str:
        """stdout then stderr: what a terminal shows, for asserting on a message's text."""
        return self.out + self.err


def governor(capsys: pytest.CaptureFixture[str], args: list[str]) -> Ran:
    """`governor ARGS`; a usage error (argparse's SystemExit) is its exit status too."""
    capsys.readouterr()  # only this command's output
    try:
        code = main(args)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    done = capsys.readouterr()
    return Ran(code, done.out, done.err)
