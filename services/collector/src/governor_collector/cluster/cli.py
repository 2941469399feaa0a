"""`governor-cluster-collector`: the command line, then the service (cluster.main).

The service's module loads the Kafka and Kubernetes clients, seconds on a busy machine, so it is
imported only once the command line is parsed: `--help` answers at once and touches nothing.
"""

from __future__ import annotations

import argparse

from governor.entry import service_parser
from governor_collector import cluster

ENV_PREFIX = "GOVERNOR_CLUSTER_COLLECTOR"


def parser() -> argparse.ArgumentParser:
    p = service_parser("governor-cluster-collector", cluster.__doc__, ENV_PREFIX)
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (host:port)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    p.add_argument("--coalesce-ms", type=int, help="delay that coalesces a burst of changes")
    p.add_argument("--resync-seconds", type=float, help="full recompute period")
    p.add_argument("--pool-label", help="node label naming a node's pool")
    p.add_argument("--metrics-port", type=int, help="serve /metrics, /healthz, /readyz here")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ...")
    p.add_argument("--no-ensure-topics", action="store_true", help="do not create the topics")
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    from governor_collector.cluster.main import start

    start(p, args)


if __name__ == "__main__":
    main()
