"""Run governor's services as real processes in tests: free ports, readiness, logs, kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from governor_tools.demo.stack import free_port

__all__ = ["Service", "free_port", "governor_service", "service_env", "terminate"]


def terminate(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM, wait `timeout`, then SIGKILL."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


class Service:
    """One service process; its JSON log goes to `log_path`."""

    def __init__(self, command: str, env: dict[str, str], port: int, log_path: Path) -> None:
        self.command, self.port, self.log_path = command, port, log_path
        self.env = {**os.environ, **env}
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False  # by kill9/stop: an exit that was asked for

    def start(self, ready_timeout: float = 90.0) -> Service:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [self.command], env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        # Only now, with the new process in place: cleared before it, the killed one would look
        # like an exit of its own, and the chaos restarter would start a second copy beside this
        # one (seen in a soak: the copy failed to bind the same port).
        self.stopped = False
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.command} exited {self.proc.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1):
                    return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        raise TimeoutError(f"{self.command} not ready in {ready_timeout}s: {self.tail()}")

    def tail(self, n: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-n:] if self.log_path.exists() else ""

    def exited_unasked(self) -> bool:
        """The process ended without kill9/stop: a crash, or a deliberate exit of its own."""
        return self.proc is not None and not self.stopped and self.proc.poll() is not None

    def kill9(self) -> None:
        self.stopped = True
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        self.stopped = True
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return r.read().decode()


# Where a service's settings keep the broker and its HTTP port: the cluster collector's are flat,
# the actuator's HTTP settings are a section; the others' as the default.
_FIELDS = {
    "actuator": ("KAFKA__BOOTSTRAP", "HTTP__PORT"),
    "cluster-collector": ("BOOTSTRAP", "METRICS_PORT"),
}


def governor_service(
    name: str,
    bootstrap: str,
    settings: Mapping[str, str],
    log_path: Path,
    *,
    port: int | None = None,
) -> Service:
    """`governor-<name>` on the broker `bootstrap`, /healthz and /metrics on `port` (a free one).

    `settings` are the service's typed settings by field (`LOAD_TOPIC`, `KAFKA__BOOTSTRAP` is
    given, under the field name `_FIELDS` says); they become its `GOVERNOR_<NAME>_*`
    environment, as compose and the manifests set them.
    """
    port = free_port() if port is None else port
    return Service(f"governor-{name}", service_env(name, bootstrap, settings, port), port, log_path)


def service_env(
    name: str, bootstrap: str, settings: Mapping[str, str], port: int
) -> dict[str, str]:
    """The `GOVERNOR_<NAME>_*` environment of `governor-<name>` on `bootstrap` with its HTTP port
    `port` and `settings` (by field, as for governor_service)."""
    prefix = f"GOVERNOR_{name.upper().replace('-', '_')}_"
    bootstrap_field, port_field = _FIELDS.get(name, ("KAFKA__BOOTSTRAP", "HTTP_PORT"))
    values = {bootstrap_field: bootstrap, port_field: str(port), **settings}
    return {prefix + k: v for k, v in values.items()}
