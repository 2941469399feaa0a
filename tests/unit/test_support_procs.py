"""The chaos run's restarter relies on telling an exit of a service's own from a kill."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.procs import Service


def test_an_exit_of_its_own_is_told_from_a_kill(tmp_path: Path) -> None:
    svc = Service("true", {}, 0, tmp_path / "log")
    assert not svc.exited_unasked()  # never started
    svc.proc = subprocess.Popen(["true"])
    svc.proc.wait(10)
    assert svc.exited_unasked()
    svc.kill9()
    assert not svc.exited_unasked()


def test_a_running_process_has_not_exited(tmp_path: Path) -> None:
    svc = Service("sleep", {}, 0, tmp_path / "log")
    svc.proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert not svc.exited_unasked()
    finally:
        svc.kill9()
    assert svc.proc.poll() is not None and not svc.exited_unasked()


def test_a_killed_service_being_started_again_never_looks_exited_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = Service("true", {}, 0, tmp_path / "log")
    svc.proc = subprocess.Popen(["true"])
    svc.proc.wait(10)
    svc.kill9()
    seen: list[bool] = []
    real_popen = subprocess.Popen

    def popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        seen.append(svc.exited_unasked())  # what the restarter sees while start() runs
        return real_popen(["true"], **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(RuntimeError):  # `true` exits at once: not ready, which is fine here
        svc.start(ready_timeout=5)
    assert seen == [False]
