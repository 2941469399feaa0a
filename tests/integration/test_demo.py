"""The main job end to end: `make demo ARGS="--duration 60 --headless"` (the full stack).

The demo starts its own Kafka and control plane (the project's scripts), every service, the
workload simulator and the trace-driven load. This test watches the API server itself (from the
moment the demo prints its kubeconfig) and asserts from what it saw:
- each web service's replicas track its offered load: Pearson correlation >= 0.7 at some lag of at
  most 60 trace-seconds (the load is what the demo offered, from its timeline.csv);
- the training job shrank during the services' burst and grew back to its maximum;
- each service's HPA twin (a real autoscaling/v2 HPA on the real controller, fed by
  governor-metrics-adapter) scaled its Deployment, and summary.json holds the three arms per
  service (governor, hpa_live, hpa_sim) with their numbers, and nothing else as an object;
- no governor service logged at WARNING or above;
- the run stopped everything (exit 0, the demo's Kafka and control plane are down) and wrote its
  report.
"""

from __future__ import annotations

import asyncio
import bisect
import csv
import json
import os
import re
import shutil
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from governor.kube import Kube, connect
from governor_tools.demo import hpa_twin
from governor_tools.demo import scenario as sc
from governor_tools.demo.kwatch import Watch
from governor_tools.demo.stack import DEVCLUSTER_SH, KAFKA_SH, REPO_ROOT, script_env
from tests.support.ci import unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DURATION = 60
SPEED = 10.0  # the demo's default
MAX_LAG_TRACE_S = 60.0
OUT = REPO_ROOT / "out" / "demo-stack"
SERVICE_LOGS = ("collector", "cluster-collector", "aggregator", "decider", "actuator")


def _need_tools() -> None:
    missing = [t for t in ("java", "mvn", "go", "make") if shutil.which(t) is None]
    if missing:
        unavailable(f"the demo needs {missing}")


def _replicas(obj: dict[str, Any]) -> int:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "PyTorchJob":
        return int(spec["pytorchReplicaSpecs"]["Worker"]["replicas"])
    return int(spec.get("replicas", 1))


class Seen:
    """(wall time, replicas) per target name, as the watch delivered them."""

    def __init__(self) -> None:
        self.series: dict[str, list[tuple[float, int]]] = defaultdict(list)

    def on_change(self, key: str, obj: dict[str, Any] | None) -> None:
        if obj is None:
            return
        name = key.rpartition("/")[2]
        value = _replicas(obj)
        series = self.series[name]
        if not series or series[-1][1] != value:
            series.append((time.time(), value))

    def at(self, name: str, t: float) -> int | None:
        series = self.series[name]
        i = bisect.bisect_right([s[0] for s in series], t) - 1
        return series[i][1] if i >= 0 else None


async def _watch(kubeconfig: str, seen: Seen, stop: asyncio.Event) -> None:
    async with await connect(kubeconfig) as api:
        kube = Kube(api)
        watches = [
            Watch(kube, "apps/v1", "deployments", namespace=sc.NAMESPACE, on_change=seen.on_change),
            Watch(
                kube, "kubeflow.org/v1", "pytorchjobs", namespace=sc.NAMESPACE,
                on_change=seen.on_change,
            ),
        ]  # fmt: skip
        tasks = [asyncio.create_task(w.run()) for w in watches]
        await stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _load_series(timeline: Path) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    with timeline.open() as f:
        for row in csv.DictReader(f):
            out[row["workload"]].append((float(row["wall"]), float(row["load"])))
    return out


def _best_correlation(
    load: list[tuple[float, float]], seen: Seen, name: str
) -> tuple[float, float]:
    """max over lags 0..MAX_LAG (trace-s) of corr(load(t), replicas(t + lag)); (r, lag)."""
    best = (-1.0, 0.0)
    end = load[-1][0]
    for lag_trace in range(0, int(MAX_LAG_TRACE_S) + 1, 5):
        lag = lag_trace / SPEED
        xs, ys = [], []
        for t, value in load:
            if t + lag > end:
                break
            r = seen.at(name, t + lag)
            if r is not None:
                xs.append(value)
                ys.append(float(r))
        if len(xs) > 10 and statistics.pstdev(ys) > 0:
            best = max(best, (statistics.correlation(xs, ys), float(lag_trace)))
    return best


async def _direct_metrics_status(line: str) -> int:
    """The demo's metrics server asked directly, without the front proxy's client certificate."""
    port = int(re.search(r"https://localhost:(\d+)", line).group(1))  # type: ignore[union-attr]
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"https://127.0.0.1:{port}/apis/metrics.k8s.io/v1beta1", ssl=False) as resp,
    ):
        return resp.status


async def test_demo_stack_headless() -> None:
    _need_tools()
    seen = Seen()
    stop = asyncio.Event()
    watch_task: asyncio.Task[None] | None = None
    lines: list[str] = []
    metrics_line = ""
    direct_status = 0
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = await asyncio.create_subprocess_exec(
        "make", "demo", f"ARGS=--duration {DURATION} --headless",
        cwd=REPO_ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    started = time.monotonic()
    try:
        while True:
            raw = await asyncio.wait_for(proc.stdout.readline(), timeout=1800)
            if not raw:
                break
            text = raw.decode(errors="replace").rstrip()
            lines.append(text)
            if text.startswith("metrics.k8s.io: APIService"):
                metrics_line = text
                direct_status = await _direct_metrics_status(text)
            if text.startswith("kubeconfig: ") and watch_task is None:
                watch_task = asyncio.create_task(_watch(text.split(": ", 1)[1], seen, stop))
        code = await asyncio.wait_for(proc.wait(), timeout=300)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, 2)
            await proc.wait()
        stop.set()
        if watch_task is not None:
            await asyncio.gather(watch_task, return_exceptions=True)
    output = "\n".join(lines[-60:])
    assert code == 0, output
    wall = time.monotonic() - started
    print(f"demo wall time {wall:.0f} s")

    # Everything it started is stopped.
    for script in (KAFKA_SH, DEVCLUSTER_SH):
        status = await asyncio.create_subprocess_exec(
            "bash", str(script), "status", env=script_env(),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert await status.wait() != 0, f"{script.name} still running after the demo"
    assert (OUT / "report.html").stat().st_size > 10_000
    assert (OUT / "report.png").stat().st_size > 10_000

    # metrics.k8s.io was served through the aggregation layer and read back through the API server
    # (the demo's own poll, shown on its progress lines).
    assert metrics_line.endswith("Available"), metrics_line or output
    assert direct_status == 401, "the metrics server answered a caller without a front-proxy cert"
    progress = [x for x in lines if x.startswith("[")]
    counts = [int(m.group(1)) for x in progress if (m := re.search(r"(\d+) PodMetrics", x))]
    assert counts and max(counts) >= 10, f"PodMetrics read back: {counts}\n{output}"

    # Replicas track load, for each service.
    loads = _load_series(OUT / "timeline.csv")
    for s in sc.SERVICES:
        series = seen.series[s.name]
        assert len(series) >= 3, f"{s.name}: replicas barely moved: {series}\n{output}"
        r, lag = _best_correlation(loads[s.workload], seen, s.name)
        print(f"{s.name}: corr {r:.3f} at lag {lag:g} trace-s; replicas {[v for _, v in series]}")
        assert r >= 0.7, f"{s.name}: best correlation {r:.3f} (lag {lag:g} trace-s)\n{output}"

    # Each HPA twin was scaled by the real HPA controller, and summary.json says so.
    summary = json.loads((OUT / "summary.json").read_text())
    arms = ("governor", "hpa_live", "hpa_sim")
    numbers = ("violation_seconds", "replica_hours", "scale_events", "peak_replicas")
    for key, value in summary.items():
        if key not in {s.name for s in sc.SERVICES}:
            assert not isinstance(value, dict), f"summary.json: {key} holds an object"
    for s, t in zip(sc.SERVICES, hpa_twin.TWINS, strict=True):
        twin = seen.series[t.name]
        print(f"{t.name}: replicas {[v for _, v in twin]}; summary {summary[s.name]}")
        assert len(twin) >= 3, f"{t.name}: the HPA barely scaled it: {twin}\n{output}"
        assert set(summary[s.name]) == set(arms), summary[s.name]
        for arm in arms:
            got = summary[s.name][arm]
            for n in numbers:
                assert isinstance(got[n], int | float) and got[n] >= 0, (s.name, arm, got)
        live = summary[s.name]["hpa_live"]
        assert live["scale_events"] >= 2, (s.name, live)
        assert live["peak_replicas"] > min(v for _, v in twin), (s.name, live, twin)
        assert live["peak_replicas"] <= max(v for _, v in twin), (s.name, live, twin)

    # The training job shrank during the burst and grew back to its maximum.
    job = seen.series[sc.TRAINING.name]
    values = [v for _, v in job]
    print(f"training job replicas: {values}")
    top = sc.TRAINING.max_replicas
    assert values[0] == top, values
    low_i = min(range(len(values)), key=values.__getitem__)
    assert values[low_i] < top, f"the job never shrank: {values}"
    shrank_at = job[low_i][0]
    calm = {s.name: seen.series[s.name][0][1] for s in sc.SERVICES}
    busy = {s.name: seen.at(s.name, shrank_at) or 0 for s in sc.SERVICES}
    assert sum(busy.values()) > sum(calm.values()), f"shrank without a burst: {calm} -> {busy}"
    assert max(values[low_i:]) == top, f"the job did not grow back: {values}"

    # No governor service logged at WARNING or above.
    for name in SERVICE_LOGS:
        text = (OUT / f"{name}.log").read_text(errors="replace")
        bad = [
            line
            for line in text.splitlines()
            if any(f'"level":"{lvl}"' in line for lvl in ("WARNING", "ERROR", "CRITICAL"))
        ]
        assert not bad, f"{name} logged:\n" + "\n".join(bad[:10])
