"""`governor-metrics-adapter`'s command line: parsed before governor_metrics_adapter.main loads."""

from __future__ import annotations

import governor_metrics_adapter
from governor.entry import service_main
from governor_metrics_adapter.config import PREFIX

main = service_main(
    "governor-metrics-adapter",
    governor_metrics_adapter.__doc__,
    PREFIX,
    "governor_metrics_adapter.main",
)

if __name__ == "__main__":
    main()
