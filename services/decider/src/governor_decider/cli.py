"""`governor-decider`'s command line: parsed before governor_decider.main loads."""

from __future__ import annotations

import governor_decider
from governor.entry import service_main

PREFIX = "GOVERNOR_DECIDER"

main = service_main("governor-decider", governor_decider.__doc__, PREFIX, "governor_decider.main")

if __name__ == "__main__":
    main()
