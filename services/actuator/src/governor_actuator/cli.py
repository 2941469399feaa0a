"""`governor-actuator`'s command line: parsed before governor_actuator.main loads."""

from __future__ import annotations

import governor_actuator
from governor.entry import service_main
from governor_actuator.config import PREFIX

main = service_main(
    "governor-actuator", governor_actuator.__doc__, PREFIX, "governor_actuator.main"
)

if __name__ == "__main__":
    main()
