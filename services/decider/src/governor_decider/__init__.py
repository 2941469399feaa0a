"""governor-decider: per-workload damped policy and per-pool allocation."""
