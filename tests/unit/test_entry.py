"""Every console script answers `--help` at once, with one shape, and starts nothing."""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from governor.entry import service_parser, service_settings
from governor.settings import KafkaSettings
from governor_tools import cli as governor_cli

SCRIPTS = sorted(
    ep.name
    for ep in importlib.metadata.entry_points(group="console_scripts")
    if ep.name in ("governor", "kubectl-governor") or ep.name.startswith("governor-")
)
SERVICES = [name for name in SCRIPTS if name.startswith("governor-")]
# What a service that started would have loaded: the clients that reach Kafka and Kubernetes.
CLIENTS = ("aiokafka", "kubernetes_asyncio", "faust")


def test_every_service_has_a_console_script() -> None:
    assert set(SERVICES) >= {
        "governor-collector",
        "governor-cluster-collector",
        "governor-aggregator",
        "governor-decider",
        "governor-actuator",
        "governor-metrics-adapter",
    }
    assert {"governor", "kubectl-governor"} <= set(SCRIPTS)  # the CLI, also as a kubectl plugin


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_exits_zero_with_the_usage(script: str) -> None:
    exe = Path(sys.executable).with_name(script)
    # Nothing listens on port 1: a script that tried to connect would hang or fail, not print.
    env = {"GOVERNOR_DECIDER_KAFKA__BOOTSTRAP": "127.0.0.1:1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout.lower() and "--help" in done.stdout


@pytest.mark.parametrize("script", SERVICES)
def test_a_services_help_has_the_shared_shape_and_loads_no_client(script: str) -> None:
    entry = importlib.metadata.entry_points(group="console_scripts", name=script)
    (ep,) = tuple(entry)
    module, func = ep.value.split(":")
    probe = (
        "import sys\n"
        f"from {module} import {func} as main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        f"print(sorted(m for m in {CLIENTS!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {script} [-h] [--config FILE]")
    assert "_CONFIG" in done.stdout
    assert done.stdout.strip().endswith("[]"), "--help loaded a client: " + done.stdout[-200:]


class Demo(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    kafka: KafkaSettings = msgspec.field(default_factory=KafkaSettings)
    tick_seconds: float = 1.0


def _parse(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = service_parser("governor-demo-service", "A service.", "GOVERNOR_DEMO_SERVICE")
    return parser, parser.parse_args(argv)


def test_settings_come_from_the_file_then_the_environment_then_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "demo.yaml"
    config.write_text("tick_seconds: 2.5\nkafka: {bootstrap: 'file:1'}\n")
    monkeypatch.setenv("GOVERNOR_DEMO_SERVICE_KAFKA__BOOTSTRAP", "env:2")
    parser, args = _parse(["--config", str(config)])
    settings = service_settings(parser, args, Demo, "GOVERNOR_DEMO_SERVICE")
    assert settings.tick_seconds == 2.5 and settings.kafka.bootstrap == "env:2"
    over = service_settings(parser, args, Demo, "GOVERNOR_DEMO_SERVICE", {"tick_seconds": 4})
    assert over.tick_seconds == 4.0 and over.kafka.bootstrap == "env:2"


def test_a_bad_value_exits_2_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GOVERNOR_DEMO_SERVICE_TICK_SECONDS", "soon")
    parser, args = _parse([])
    with pytest.raises(SystemExit) as exit_:
        service_settings(parser, args, Demo, "GOVERNOR_DEMO_SERVICE")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("governor-demo-service: ") and "tick_seconds" in err
    with pytest.raises(SystemExit):
        service_settings(parser, args, Demo, "GOVERNOR_DEMO_SERVICE", {"tick_seconds": "x"})


COMMANDS = governor_cli.parser().paths()


def test_the_cli_has_every_documented_command() -> None:
    top = {words[0] for words in COMMANDS}
    assert top >= {"ab", "cluster", "compare", "demo", "dev", "explain", "import", "policies"}
    assert top >= {"scenario", "schema", "simulate", "topics", "traces"}
    assert ["dev", "kafka", "up"] in COMMANDS and ["policies", "apply"] in COMMANDS


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_every_governor_command_answers_help(
    words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        governor_cli.main([*words, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: governor {' '.join(words)} [-h]")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["ab", "web", "--capacity-per-replica", "1"], "argument WORKLOAD: 'web' is not namespace"),
        (
            ["ab", "a/Deployment/b", "--capacity-per-replica", "1", "--since", "1x"],
            "argument --since: '1x': a duration like 90s, 30m, 2h",
        ),
        (["explain", "a/Deployment/b", "--last", "0"], "argument --last/-n: 0 is not in the range"),
        (["explain", "a/Deployment/b", "-o", "yaml"], "argument --output/-o: invalid choice"),
        (["simulate", "t.csv", "--out", "o"], "required: --capacity-per-replica"),
        (
            ["simulate", "t.csv", "--capacity-per-replica", "0", "--out", "o"],
            "governor simulate: error: --capacity-per-replica must be > 0",
        ),
        (
            ["simulate", "t.csv", "--capacity-per-replica", "1", "--out", "o", "--baseline", "x"],
            "argument --baseline: only `--baseline hpa` is known, got 'x'",
        ),
    ],
)
def test_a_usage_error_exits_2_naming_the_field_and_the_fix(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        governor_cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: governor {argv[0]} ") and says in err


def test_a_group_without_its_subcommand_prints_its_commands_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert governor_cli.main(["dev", "kafka"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: governor dev kafka [-h] COMMAND")
    assert "up" in err and "down" in err and "status" in err


REPO = Path(__file__).resolve().parents[2]
# A `governor` invocation: in a code span, or on a line of a code block or of the Makefile.
WORDS = r"governor ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?"
SPAN = re.compile(r"`(?:kubectl |uv run (?:--frozen )?)?" + WORDS)
# a command line: `governor ...`, `uv run [--frozen] governor ...`, `kubectl governor ...`
CODE = re.compile(r"\s*(?:\$ )?(?:(?:uv|\$\(UV\)) run (?:--frozen )?|kubectl )?" + WORDS)


def _documented() -> set[tuple[str, str | None]]:
    found: set[tuple[str, str | None]] = set()
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        fenced = False
        for line in path.read_text().splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
            found |= {m.groups() for m in SPAN.finditer(line)}
            if fenced and (m := CODE.match(line)):
                found.add(m.groups())
    for line in (REPO / "Makefile").read_text().splitlines():
        if m := CODE.match(line.lstrip("\t@")):
            found.add(m.groups())
    return found


def test_every_documented_governor_command_is_one() -> None:
    groups = {words[0] for words in COMMANDS if len(words) == 2}
    documented = _documented()
    assert len(documented) >= 10, documented
    for command, sub in documented:
        assert [command] in COMMANDS, f"the docs call `governor {command}`, which is no command"
        if command in groups:
            assert [command, sub] in COMMANDS, f"`governor {command} {sub}` is no command"
