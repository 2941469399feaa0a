"""deploy/components.sh on a machine that lacks everything (a PATH with only a shell): it names
each missing Debian package and Go, prints the one command to run, and fails only under CI."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "components.sh"


@pytest.fixture
def bare_path(tmp_path: Path) -> str:
    for tool in ("bash", "id", "dirname", "cat"):
        found = shutil.which(tool)
        assert found, tool
        (tmp_path / tool).symlink_to(found)
    return str(tmp_path)


def run(path: str, *, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/root"), "CI": "true" if ci else ""}
    return subprocess.run(
        [shutil.which("bash") or "bash", str(SCRIPT), "ensure"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_names_what_is_missing_and_the_command_and_fails_only_under_ci(bare_path: str) -> None:
    local = run(bare_path, ci=False)
    assert local.returncode == 0, local.stderr
    for pkg in ("openjdk-17-jre-headless", "maven", "prometheus", "kcat", "kubectl"):
        assert pkg in local.stderr
    assert "sudo apt-get install -y openjdk-17-jre-headless maven prometheus kcat" in local.stderr
    assert "go not found" in local.stderr
    assert run(bare_path, ci=True).returncode == 1


def test_usage() -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 2 and "usage:" in done.stderr
