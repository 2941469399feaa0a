"""`governor-cluster-collector`: run the cluster side of the collector.

Configuration: `GOVERNOR_CLUSTER_COLLECTOR_*` environment variables or the YAML file named by
`GOVERNOR_CLUSTER_COLLECTOR_CONFIG` (fields of `ClusterCollectorSettings`); the command-line
options below override them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

import msgspec

from governor.settings import ConfigError, load_settings
from governor.telemetry import HealthServer, configure_logging
from governor_collector.cluster.collector import ClusterCollector, ClusterCollectorSettings

ENV_PREFIX = "GOVERNOR_CLUSTER_COLLECTOR"
log = logging.getLogger("governor.collector.cluster")


def parse_args(argv: list[str] | None = None) -> ClusterCollectorSettings:
    p = argparse.ArgumentParser(
        prog="governor-cluster-collector",
        description="Publish ScalingPolicies, workload state and node/device inventory to Kafka.",
    )
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (host:port)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    p.add_argument("--coalesce-ms", type=int, help="delay that coalesces a burst of changes")
    p.add_argument("--resync-seconds", type=float, help="full recompute period")
    p.add_argument("--pool-label", help="node label naming a node's pool")
    p.add_argument("--metrics-port", type=int, help="serve /metrics, /healthz, /readyz here")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ...")
    p.add_argument("--no-ensure-topics", action="store_true", help="do not create the topics")
    args = p.parse_args(argv)
    try:
        base = load_settings(ClusterCollectorSettings, ENV_PREFIX)
    except ConfigError as e:
        p.error(str(e))
    over = {
        k: v
        for k, v in {
            "bootstrap": args.bootstrap,
            "kubeconfig": args.kubeconfig,
            "coalesce_ms": args.coalesce_ms,
            "resync_seconds": args.resync_seconds,
            "pool_label": args.pool_label,
            "metrics_port": args.metrics_port,
            "log_level": args.log_level,
        }.items()
        if v is not None
    }
    if args.no_ensure_topics:
        over["ensure_topics"] = False
    try:
        return msgspec.convert({**msgspec.structs.asdict(base), **over}, ClusterCollectorSettings)
    except msgspec.ValidationError as e:
        p.error(str(e))
    raise AssertionError("unreachable")


async def run(settings: ClusterCollectorSettings) -> None:
    collector = ClusterCollector(settings)
    health: HealthServer | None = None
    if settings.metrics_port is not None:
        health = HealthServer(settings.metrics_host, settings.metrics_port, lambda: collector.ready)
        await health.start()
    task = asyncio.create_task(collector.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        log.info("stopped")
    finally:
        if health is not None:
            await health.stop()


def main(argv: list[str] | None = None) -> None:
    settings = parse_args(argv)
    configure_logging("cluster-collector", settings.log_level)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(settings))
    sys.exit(0)


if __name__ == "__main__":
    main()
