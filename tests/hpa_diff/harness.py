"""Build (build.sh, cached) and drive the hpa-diff harness: one process, batches of syncs."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import TracebackType

import msgspec

from tests.hpa_diff.wire import Request, Response, Sync, Synced

BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"
BUILD_TIMEOUT_S = 1800.0  # a cold Go build cache on 2 cores; warm: seconds


class HarnessError(RuntimeError):
    pass


def build() -> Path:
    """The harness binary, built first if its inputs changed."""
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise HarnessError(f"{BUILD_SCRIPT} failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


class Harness:
    """The upstream controller in one process; each case keeps its controller across syncs."""

    def __init__(self, binary: Path) -> None:
        self._proc = subprocess.Popen(
            [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self._encode = msgspec.json.Encoder().encode
        self._decode = msgspec.json.Decoder(Response).decode
        self.features: dict[str, bool] = {}

    def sync(self, syncs: list[Sync]) -> list[Synced]:
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(self._encode(Request(syncs)) + b"\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except BrokenPipeError:
            line = b""
        if not line:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise HarnessError(f"hpa-diff exited ({proc.wait()}): {err[-4000:]}")
        response = self._decode(line)
        self.features = response.features
        if [r.case for r in response.results] != [s.case for s in syncs]:
            raise HarnessError("hpa-diff answered for other cases than asked")
        return response.results

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> Harness:
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
