"""`governor-collector`'s command line: parsed before governor_collector.main loads."""

from __future__ import annotations

import governor_collector
from governor.entry import service_main
from governor_collector.config import PREFIX

main = service_main(
    "governor-collector", governor_collector.__doc__, PREFIX, "governor_collector.main"
)

if __name__ == "__main__":
    main()
