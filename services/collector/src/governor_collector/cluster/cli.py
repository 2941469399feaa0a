"""`governor-cluster-collector`'s command line; the service itself is cluster.main (see
governor.entry)."""

from __future__ import annotations

import argparse

from governor.entry import service_main
from governor_collector import cluster

ENV_PREFIX = "GOVERNOR_CLUSTER_COLLECTOR"


def options(p: argparse.ArgumentParser) -> None:
    """The options that override the settings (see cluster.main.resolve_settings)."""
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (host:port)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    p.add_argument("--coalesce-ms", type=int, help="delay that coalesces a burst of changes")
    p.add_argument("--resync-seconds", type=float, help="full recompute period")
    p.add_argument("--pool-label", help="node label naming a node's pool")
    p.add_argument("--metrics-port", type=int, help="serve /metrics, /healthz, /readyz here")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ...")
    p.add_argument("--no-ensure-topics", action="store_true", help="do not create the topics")


main = service_main(
    "governor-cluster-collector",
    cluster.__doc__,
    ENV_PREFIX,
    "governor_collector.cluster.main",
    options,
)


if __name__ == "__main__":
    main()
