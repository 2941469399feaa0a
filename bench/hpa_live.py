"""The simulator's reference HPA against the real HPA controller on long trace segments.

Runs tests/integration/test_hpa_live.py (the real kube-apiserver and kube-controller-manager,
governor-metrics-adapter, Kafka; see governor_tools.hpa_live) on each segment and prints one
`hpa-live <trace>[a:b]: ...` line per segment. Wall time is trace
time / 7.5 (the controller syncs every 2 s for HPA's 15 s).

    uv run python bench/hpa_live.py                       # the default three segments
    uv run python bench/hpa_live.py builtin:google-2019-cpu:3868:24 ...   # trace:first row:rows

Export the usual port and devcluster variables first on a shared machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [
    "builtin:alibaba-2018-cpu:420:180",  # 30 min, 10 s rows
    "builtin:alibaba-2018-net-in:14160:180",  # 30 min, 10 s rows
    "builtin:google-2019-cpu:3860:12",  # 1 h, 300 s rows
]


def main(argv: list[str]) -> int:
    segments = argv or DEFAULT
    env = {**os.environ, "GOVERNOR_HPA_LIVE_SEGMENTS": ",".join(segments)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
           "tests/integration/test_hpa_live.py"]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    # pytest -q prints a test's dot on the line the next test's output starts on
    lines = [x[x.index("hpa-live ") :] for x in done.stdout.splitlines() if "hpa-live " in x]
    for line in lines:
        print(line)
    if not lines:
        print(done.stdout[-3000:], done.stderr[-2000:], sep="\n")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
