"""The decider's typed settings (`GOVERNOR_DECIDER_*`, governor.entry.service_settings)."""

from __future__ import annotations

from typing import Literal

import msgspec

from governor import events
from governor.settings import KafkaSettings


class DeciderSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    kafka: KafkaSettings = msgspec.field(default_factory=KafkaSettings)
    group_id: str = "governor-decider"
    # Static group membership (KIP-345), a stable name per replica (a StatefulSet's pod name): a
    # SIGKILLed decider restarted under it gets its partitions back at once, not after the
    # session timeout (30 s). Unset where a restart gets a new name (a Deployment).
    group_instance_id: str | None = None
    tick_seconds: float = 1.0
    step_seconds: float = 15.0
    pending_grace_seconds: float = 60.0
    http_host: str = "127.0.0.1"
    http_port: int = 8083
    log_level: str = "INFO"
    create_topics: bool = True
    journal: str | None = None  # path: a JSON-lines record of every input, for replay
    # The one source of truth for policies: `governor policies apply` ("file") or the
    # ScalingPolicy objects published by the cluster-side collector ("cluster").
    policy_source: Literal["file", "cluster"] = "file"
    # The names of the load, recommendations and decisions topics (same types and keys): isolated
    # pipelines on a shared broker (test and benchmark runs, a canary decider beside the real one).
    load_topic: str = events.LOAD.name
    recommendations_topic: str = events.RECOMMENDATIONS.name
    decisions_topic: str = events.DECISIONS.name
    # And its tables' and checkpoints': a compacted topic keeps a deleted key's tombstone a day,
    # and a decider reads these in full when it starts (the checkpoints at every assignment),
    # so runs that share them pay for every earlier run's workloads (bench/pipeline_latency.py).
    policies_topic: str = events.POLICIES.name
    workloads_topic: str = events.WORKLOADS.name
    checkpoints_topic: str = events.DECIDER_STATE.name
    # Stage 2's hysteresis margin (see governor.cores.decider.DeciderCore.allocation_margin).
    allocation_margin: float = 0.0
    # Stage 1's checkpoints are flushed (and then the load offsets committed) this often.
    checkpoint_seconds: float = 5.0
    # Records per fetch of the group (load windows and recommendations). Each fetch costs one
    # to three acknowledgement round trips (recommendations; stage 2's checkpoints, then its
    # decisions): at 2,000 the instance owning a big pool's stage 2 fell ~10,000 load windows
    # behind at 10,000 workloads while its peer kept up.
    max_poll_records: int = 10_000
    # A load or recommendations partition more than this many records behind its end is left
    # out of the tick until it caught up (about a second of load per partition at 10,000
    # workloads on 6 partitions): its windows are stale and evaluating them all by time, every
    # tick, took the CPU the catch-up needed.
    behind_records: int = 2_000
    # Stage 2 of a workload whose pool has no node in the cluster table (and is not elastic) runs
    # in the decider owning its load partition (governor.cores.decider_handover): false sends
    # every recommendation to the pool's owner, as before.
    pass_through: bool = True
