"""`governor-cluster-collector`: run the cluster side of the collector.

Configuration: `GOVERNOR_CLUSTER_COLLECTOR_*` environment variables or the YAML file named by
`GOVERNOR_CLUSTER_COLLECTOR_CONFIG` or --config (fields of `ClusterCollectorSettings`); the
command-line options below override them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from governor.entry import service_settings
from governor.telemetry import HealthServer, configure_logging
from governor_collector.cluster.cli import ENV_PREFIX
from governor_collector.cluster.collector import ClusterCollector, ClusterCollectorSettings

log = logging.getLogger("governor.collector.cluster")


def resolve_settings(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> ClusterCollectorSettings:
    """The settings from defaults, file and environment, then the command-line options."""
    over: dict[str, object] = {
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
    return service_settings(parser, args, ClusterCollectorSettings, ENV_PREFIX, over)


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


def start(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Run the cluster collector (the command line parsed by governor_collector.cluster.cli)."""
    resolved = resolve_settings(parser, args)
    configure_logging("cluster-collector", resolved.log_level)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(resolved))
    sys.exit(0)
