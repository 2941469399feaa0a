"""The decider core under the quotas and queues tables: capped decisions that name the quota
or queue, shortfalls that do, a tombstone that lifts the cap, and a journal that replays it."""

from __future__ import annotations

from pathlib import Path

from governor.cores.decider import DeciderCore
from governor.events import QueueState, QuotaState
from governor_decider import journal
from tests.unit.test_cores_decider_stage2 import (
    TRAIN,
    WEB,
    replicas,
    states,
    two_nodes,
)

QUEUE = QueueState(
    queue="research", capability={"nvidia.com/gpu": 6.0}, covers={TRAIN: {"nvidia.com/gpu": 1.0}}
)
QUOTA = QuotaState(
    quota="shop/compute-quota",
    namespace="shop",
    hard={"requests.cpu": 12.0},
    unmanaged={"requests.cpu": 2.0},
    covers={WEB: {"requests.cpu": 2.0}},
)


def test_quotas_and_queues_cap_stage_2_and_are_named(tmp_path: Path) -> None:
    drv = two_nodes(tmp_path / "journal")
    drv.core.on_queue(QUEUE.queue, QUEUE)
    drv.journal.queue(QUEUE.queue, QUEUE)
    drv.core.on_quota(QUOTA.quota, QUOTA)
    drv.journal.quota(QUOTA.quota, QUOTA)
    t = 10_000.0
    for s in states(4, 12, t - 1):
        drv.workload(s)
    # The service wants 12 (840 rps / 70): the quota admits (12 - 2) / 2 = 5. The job wants 16,
    # its queue allows 6 GPUs: it is shrunk from 12 to 6 although the pool has 16 GPUs.
    out = drv.cycle(t, 840.0)
    assert replicas(out) == {WEB: 5, TRAIN: 6}
    web = next(d for d in out.decisions if d.workload == WEB)
    train = next(d for d in out.decisions if d.workload == TRAIN)
    assert [r.limit for r in web.reasons if r.limit] == ["quota:shop/compute-quota"]
    assert any(
        r.detail.startswith("quota: shop/compute-quota requests.cpu 12/12 -> 5")
        for r in web.reasons
    )
    assert [r.limit for r in train.reasons if r.limit] == ["queue:research"]
    assert {(s.workload, s.limit) for s in out.shortfalls} == {
        (WEB, "quota:shop/compute-quota"),
        (TRAIN, "queue:research"),
    }
    for s in states(5, 6, t + 1):
        drv.workload(s)
    # The quota is deleted (its tombstone): the cap lifts at once (hysteresis does not keep an
    # allocation made under a limit that is gone); the service's 12 GPUs shrink the job to its
    # floor (16 GPUs in the pool).
    drv.core.on_quota(QUOTA.quota, None)
    drv.journal.quota(QUOTA.quota, None)
    out = drv.cycle(t + 5, 840.0)
    assert replicas(out) == {WEB: 12, TRAIN: 4}
    drv.journal.close()
    replayed = [
        d
        for _, o in journal.replay(journal.read(tmp_path / "journal"), DeciderCore)
        for d in ([o.decision] if o.decision else []) + o.decisions
    ]
    assert replayed == drv.decided
