"""`governor-aggregator`'s command line: parsed before governor_aggregator.main loads."""

from __future__ import annotations

import governor_aggregator
from governor.entry import service_main

PREFIX = "GOVERNOR_AGGREGATOR"

main = service_main(
    "governor-aggregator", governor_aggregator.__doc__, PREFIX, "governor_aggregator.main"
)

if __name__ == "__main__":
    main()
