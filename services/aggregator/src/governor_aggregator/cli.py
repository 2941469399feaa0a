"""`governor-aggregator`: the command line, then the service (governor_aggregator.main).

The service's module loads the Kafka and Kubernetes clients, seconds on a busy machine, so it is
imported only once the command line is parsed: `--help` answers at once and touches nothing.
"""

from __future__ import annotations

import governor_aggregator
from governor.entry import service_parser

PREFIX = "GOVERNOR_AGGREGATOR"


def main(argv: list[str] | None = None) -> None:
    parser = service_parser("governor-aggregator", governor_aggregator.__doc__, PREFIX)
    args = parser.parse_args(argv)
    from governor_aggregator.main import start

    start(parser, args)


if __name__ == "__main__":
    main()
