"""What several benchmarks share: the synthetic metric samples and the local components (run as
`python bench/<name>.py`, whose folder is then on the import path)."""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path

from governor.events import MetricSample

REPO = Path(__file__).resolve().parents[1]


def metric_samples(n: int, namespace: str, source: str = "") -> list[MetricSample]:
    """`n` samples 1 ms apart, spread over 500 Deployments of `namespace`."""
    t0 = 1_800_000_000.0
    return [
        MetricSample(
            workload=f"{namespace}/Deployment/svc-{i % 500}",
            metric="http_requests_per_second",
            value=float(i % 1000) * 0.5,
            timestamp=t0 + i * 0.001,
            unit="1/s",
            source=source,
        )
        for i in range(n)
    ]


def component_up(script: str) -> str:
    """`bash deploy/<script> up` (started, or already running): the last line it prints (the
    Kafka bootstrap, the kubeconfig's path)."""
    out = subprocess.run(
        ["bash", str(REPO / "deploy" / script), "up"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.strip().splitlines()[-1]


def python_speed(loops: int = 1_000_000, repeats: int = 5) -> float:
    """CPU nanoseconds per iteration of a fixed pure-Python loop (a dict update and an
    addition), the median of `repeats`: how fast this machine runs interpreted code right now.
    On a shared host the same code has run 1.6x slower from one hour to the next; a figure read
    beside this one can be told apart from a change of the code."""
    times = []
    for _ in range(repeats):
        held: dict[int, int] = {}
        started = time.process_time()
        total = 0
        for i in range(loops):
            held[i & 1023] = i
            total += i
        times.append(time.process_time() - started)
    return 1e9 * statistics.median(times) / loops
