"""The demo's processes: prerequisites, Kafka and the control plane (through the project's own
scripts, each cached), and every governor service as a subprocess logging to out/demo-stack/.

The demo runs its own broker (port 19092) and its own control plane (state dir
~/.cache/governor/demo/devcluster), so it never touches the ones tests or users run on the default
ports, and it resets both at start: every run begins from the same empty state. The control plane
includes the real HPA controller (`up --with-hpa`, its sync period 15 trace-s scaled like the rest)
for the HPA twins. GOVERNOR_KAFKA_PORT, GOVERNOR_KAFKA_CONTROLLER_PORT and
GOVERNOR_DEVCLUSTER_HOME, when set, choose another broker and state dir (one demo per state dir; a
run resets them). `stop()` ends every process it started (services with SIGTERM then SIGKILL, Kafka
and the control plane through their scripts' `down`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[5]
KAFKA_SH = REPO_ROOT / "deploy" / "kafka" / "kafka.sh"
DEVCLUSTER_SH = REPO_ROOT / "deploy" / "devcluster" / "devcluster.sh"
CRDS = [
    REPO_ROOT / "deploy" / "k8s" / "crds" / "scalingpolicy.yaml",
    REPO_ROOT / "deploy" / "k8s" / "crds" / "testing" / "pytorchjob.yaml",
    REPO_ROOT / "deploy" / "k8s" / "crds" / "testing" / "koordinator-device.yaml",
]
KAFKA_PORT = int(os.environ.get("GOVERNOR_KAFKA_PORT", "19092"))
KAFKA_CONTROLLER_PORT = int(os.environ.get("GOVERNOR_KAFKA_CONTROLLER_PORT", "19093"))
CACHE = Path(os.environ.get("GOVERNOR_CACHE", Path.home() / ".cache" / "governor"))
DEVCLUSTER_HOME = Path(os.environ.get("GOVERNOR_DEVCLUSTER_HOME", CACHE / "demo" / "devcluster"))

Say = Callable[[str], None]


class StackError(RuntimeError):
    """Something the demo needs is missing or did not start; the message says what to do."""


def missing_prerequisites() -> list[str]:
    """What is missing to run the stack, one short phrase each (empty: all there)."""
    missing = []
    for tool, what in (
        ("python3", "Python >= 3.11"),
        ("java", "Java 17+ (openjdk-17-jre-headless)"),
        ("mvn", "Maven"),
        ("go", "Go >= 1.24"),
        ("setsid", "util-linux (setsid, flock)"),
        ("curl", "curl"),
    ):
        if shutil.which(tool) is None:
            missing.append(what)
    return missing


class Busy(StackError):
    """Another demo holds the machine's demo broker and control plane."""


@contextlib.contextmanager
def exclusive(path: Path = DEVCLUSTER_HOME.parent / "demo.lock") -> Iterator[None]:
    """One demo per machine: they share the broker port and the control plane's state dir, and
    each resets both at start, so a second one would pull the first one's stack from under it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            raise Busy(
                f"another governor demo is running ({holder}); wait for it or stop it"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()}, started {time.strftime('%H:%M:%S')}")
        f.flush()
        try:
            yield
        finally:
            f.truncate(0)
            fcntl.flock(f, fcntl.LOCK_UN)


def free_port() -> int:
    """A port free now that this process has not handed out before: services started together
    must not get the same one (the second's bind would fail while the first answers its health
    checks, and a request meant for the second would reach the first)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


_HANDED_OUT: set[int] = set()


def script_env(hpa_sync_seconds: float = 15.0) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["GOVERNOR_KAFKA_PORT"] = str(KAFKA_PORT)
    env["GOVERNOR_KAFKA_CONTROLLER_PORT"] = str(KAFKA_CONTROLLER_PORT)
    env["GOVERNOR_DEVCLUSTER_HOME"] = str(DEVCLUSTER_HOME)
    env["GOVERNOR_DEVCLUSTER_HPA_SYNC_PERIOD"] = f"{hpa_sync_seconds:g}s"
    return env


@dataclass
class Proc:
    name: str
    command: list[str]
    env: dict[str, str]
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def ready(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            tail = (
                self.log_path.read_text(errors="replace")[-1500:] if self.log_path.exists() else ""
            )
            raise StackError(f"{self.name} exited ({self.log_path}):\n{tail}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass


@dataclass
class Stack:
    out: Path
    say: Say
    bootstrap: str = f"127.0.0.1:{KAFKA_PORT}"
    kubeconfig: Path | None = None
    procs: list[Proc] = field(default_factory=list)
    kafka_started: bool = False
    cluster_started: bool = False
    collector_port: int = 0
    hpa_sync_seconds: float = 15.0  # the HPA controller's sync period, wall seconds
    timings: dict[str, float] = field(default_factory=dict)

    def _script(self, script: Path, verb: str, timeout: float, *args: str) -> str:
        log = self.out / f"{script.stem}.log"
        with log.open("ab") as err:
            try:
                done = subprocess.run(
                    ["bash", str(script), verb, *args],
                    env=script_env(self.hpa_sync_seconds),
                    stdout=subprocess.PIPE,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    timeout=timeout,
                    check=False,
                    start_new_session=True,
                )
            except subprocess.TimeoutExpired:
                raise StackError(
                    f"{script.name} {verb}: no answer in {timeout:.0f}s ({log})"
                ) from None
        if done.returncode != 0:
            tail = log.read_text(errors="replace")[-1500:]
            raise StackError(f"{script.name} {verb} failed ({log}):\n{tail}")
        lines = done.stdout.decode().strip().splitlines()
        return lines[-1] if lines else ""

    def up_infra(self) -> None:
        """Kafka and the control plane, each from a clean state (jars and binary cached)."""
        t = time.monotonic()
        if not (CACHE / "kafka" / "lib" / ".resolved").is_file():
            self.say("kafka: first run, resolving the broker's jars from Maven Central (~40 s)")
        xdg = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        bin_dir = Path(
            os.environ.get("GOVERNOR_DEVCLUSTER_BIN_DIR", xdg / "governor" / "devcluster" / "bin")
        )
        if not (bin_dir / "devcluster").is_file():
            self.say(
                "control plane: first run, building kube-apiserver + etcd from the official Go "
                "modules (5-20 min on 2 cores, ~3 GiB of Go caches; cached afterwards; "
                f"progress in {bin_dir / 'build.log'})"
            )
        self.say(f"kafka: {KAFKA_SH.relative_to(REPO_ROOT)} reset + up on {self.bootstrap}")
        self._script(KAFKA_SH, "reset", 120)
        self.kafka_started = True
        self._script(KAFKA_SH, "up", 900)
        self.timings["kafka"] = time.monotonic() - t
        t = time.monotonic()
        self.say(
            f"control plane: {DEVCLUSTER_SH.relative_to(REPO_ROOT)} reset + up ({DEVCLUSTER_HOME})"
        )
        self._script(DEVCLUSTER_SH, "reset", 120)
        self.cluster_started = True
        self.kubeconfig = Path(self._script(DEVCLUSTER_SH, "up", 3600, "--with-hpa"))
        self.timings["control plane"] = time.monotonic() - t
        self.say(f"kubeconfig: {self.kubeconfig}")

    def start_services(self, env: Mapping[str, Mapping[str, str]], timeout: float = 120.0) -> None:
        """Every service, then wait for all /readyz. `env`: extra variables per service."""
        assert self.kubeconfig is not None
        t = time.monotonic()
        kube = str(self.kubeconfig)
        specs: list[tuple[str, str, dict[str, str]]] = [
            ("collector", "GOVERNOR_COLLECTOR", {"KAFKA__BOOTSTRAP": self.bootstrap,
                                                  "HTTP_HOST": "127.0.0.1", "KUBECONFIG": kube}),
            ("cluster-collector", "GOVERNOR_CLUSTER_COLLECTOR", {"BOOTSTRAP": self.bootstrap,
                                                                  "KUBECONFIG": kube,
                                                                  "METRICS_HOST": "127.0.0.1"}),
            ("aggregator", "GOVERNOR_AGGREGATOR", {"KAFKA__BOOTSTRAP": self.bootstrap,
                                                    "DATA_DIR": str(self.out / "aggregator-data")}),
            ("decider", "GOVERNOR_DECIDER", {"KAFKA__BOOTSTRAP": self.bootstrap,
                                              "POLICY_SOURCE": "cluster"}),
            ("actuator", "GOVERNOR_ACTUATOR", {"KAFKA__BOOTSTRAP": self.bootstrap,
                                                "KUBECONFIG": kube, "HTTP__HOST": "127.0.0.1"}),
            ("metrics-adapter", "GOVERNOR_METRICS_ADAPTER", {"KAFKA__BOOTSTRAP": self.bootstrap,
                                                              "KUBECONFIG": kube,
                                                              "HTTP__HOST": "127.0.0.1"}),
        ]  # fmt: skip
        port_var = {
            "collector": "HTTP_PORT",
            "cluster-collector": "METRICS_PORT",
            "aggregator": "HTTP_PORT",
            "decider": "HTTP_PORT",
            "actuator": "HTTP__PORT",
            "metrics-adapter": "HTTP__PORT",
        }
        for name, prefix, values in specs:
            port = free_port()
            if name == "collector":
                self.collector_port = port
            values = {**values, port_var[name]: str(port), **env.get(name, {})}
            proc = Proc(
                name,
                [f"governor-{name}"],
                {f"{prefix}_{k}": v for k, v in values.items()},
                port,
                self.out / f"{name}.log",
            )
            proc.log_path.unlink(missing_ok=True)
            proc.start()
            self.procs.append(proc)
        deadline = time.monotonic() + timeout
        waiting = list(self.procs)
        while waiting:
            waiting = [p for p in waiting if not p.ready()]
            if waiting and time.monotonic() > deadline:
                names = ", ".join(p.name for p in waiting)
                raise StackError(f"not ready in {timeout:.0f}s: {names} (logs in {self.out})")
            time.sleep(0.3)
        self.timings["services"] = time.monotonic() - t

    def check_alive(self) -> None:
        for p in self.procs:
            if p.proc is not None and p.proc.poll() is not None:
                tail = p.log_path.read_text(errors="replace")[-1500:]
                raise StackError(f"{p.name} exited with {p.proc.returncode}:\n{tail}")

    def stop_services(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.procs = []

    def _down(self, script: Path, timeout: float, errors: list[str]) -> None:
        """`script down`; a failure goes to `errors`, so that the next component still stops."""
        try:
            self._script(script, "down", timeout)
        except StackError as e:
            errors.append(str(e))

    def stop(self) -> None:
        """Every process this stack started; safe to call twice."""
        self.stop_services()
        errors: list[str] = []
        if self.cluster_started:
            self._down(DEVCLUSTER_SH, 90, errors)
            self.cluster_started = False
        if self.kafka_started:
            self._down(KAFKA_SH, 120, errors)
            self.kafka_started = False
        if errors:
            raise StackError("; ".join(errors))
