"""The chaos run's pull source: a real Prometheus (Debian's, tests/fixtures/prometheus.py) that
scrapes an exporter of the offered load of `PULLED` web services; their policies read it with a
`prometheus` source (one series: the workload's total, which the AverageValue target divides by
the replicas, as the pushed per-pod samples' total is), and the simulator does not push for them.

`metric-source-outage` stops this Prometheus process (and the pushes): the collectors' queries
fail (`unreachable`), no sample arrives, and scaling must freeze until it is started again.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from governor_tools.demo import scenario as sc
from tests.chaos.load import LoadPlan
from tests.fixtures.prometheus import Exporter, PrometheusServer
from tests.support.procs import free_port

PULLED = 4  # web-00 .. web-03 read their load from Prometheus
QUERY_INTERVAL_S = 0.5
FEED_S = 0.25


def query(name: str) -> str:
    return f'governor_test_load{{workload="{name}"}}'


@dataclass
class PromSource:
    """The exporter, the Prometheus scraping it every second, and the task keeping the gauge at
    each pulled service's offered load."""

    out: Path
    server: PrometheusServer = field(init=False)
    _started: Any = None

    def start(self) -> None:
        binary = os.environ.get("PROMETHEUS_BIN") or shutil.which("prometheus")
        if not binary:
            raise RuntimeError(
                "the chaos run needs `prometheus` on PATH (apt-get install prometheus)"
            )
        registry = CollectorRegistry()
        load = Gauge("governor_test_load", "Offered load (rps).", ["workload"], registry=registry)
        port = free_port()
        self._started = start_http_server(port, addr="127.0.0.1", registry=registry)
        workdir = self.out / "prometheus"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        self.server = PrometheusServer(binary, free_port(), workdir, Exporter(port, registry, load))
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
        if isinstance(self._started, tuple):  # prometheus-client >= 0.20: (server, thread)
            server, thread = self._started
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

    async def feed(self, plan: LoadPlan, pulled: frozenset[str]) -> None:
        """The gauge follows each pulled service's load (Prometheus samples it every second)."""
        gauge = self.server.exporter.load
        while True:
            now = time.time()
            for name in pulled:
                gauge.labels(workload=name).set(plan.load(name, now))
            await asyncio.sleep(FEED_S)

    def policy(self, obj: dict[str, Any], s: sc.WebService) -> dict[str, Any]:
        """`obj` (the service's policy) with its metric read from this Prometheus."""
        metric = obj["spec"]["metrics"][0]
        metric["source"] = {
            "type": "prometheus",
            "query": query(s.name),
            "serverAddress": self.server.url,
            "intervalSeconds": QUERY_INTERVAL_S,
        }
        return obj
