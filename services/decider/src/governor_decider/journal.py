"""A JSON-lines record of every input a decider core saw, in order, so a run can be replayed
through `DeciderCore` and compared decision by decision (the service keeps one journal per
stage: replay each through a core of that role)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import msgspec

from governor.cores.decider import DeciderCore, Outputs
from governor.events import (
    DeciderCheckpoint,
    LoadWindow,
    NodeState,
    QueueState,
    QuotaState,
    Recommendation,
    ScaleDecision,
    WorkloadState,
)
from governor.ownership import Ownership
from governor.spec import ScalingPolicy

log = logging.getLogger("governor.decider")


class PolicyIn(msgspec.Struct, tag="policy"):
    key: str
    policy: ScalingPolicy | None


class WorkloadIn(msgspec.Struct, tag="workload"):
    state: WorkloadState


class WindowIn(msgspec.Struct, tag="window"):
    window: LoadWindow


class CheckpointIn(msgspec.Struct, tag="checkpoint"):
    checkpoint: DeciderCheckpoint


class DecideIn(msgspec.Struct, tag="decide"):
    workload: str
    now: float


class NodeIn(msgspec.Struct, tag="node"):
    node: NodeState


class NodeDeletedIn(msgspec.Struct, tag="node_deleted"):
    name: str


class DecidePoolIn(msgspec.Struct, tag="decide_pool"):
    pool: str
    now: float


class QuotaIn(msgspec.Struct, tag="quota"):
    key: str
    quota: QuotaState | None  # None: its tombstone


class QueueIn(msgspec.Struct, tag="queue"):
    key: str
    queue: QueueState | None  # None: its tombstone


class RecommendationIn(msgspec.Struct, tag="recommendation"):
    recommendation: Recommendation


class AssignIn(msgspec.Struct, tag="assign"):
    """A rebalance: the partitions this instance now owns (none: revoked)."""

    load_partitions: int
    load: list[int]
    recommendation_partitions: int
    recommendations: list[int]
    at: float = float("-inf")

    def ownership(self) -> Ownership:
        return Ownership(
            self.load_partitions,
            frozenset(self.load),
            self.recommendation_partitions,
            frozenset(self.recommendations),
        )


class RestartIn(msgspec.Struct, tag="restart"):
    """The process (re)started: its memory was empty before the checkpoints that follow."""


Entry = (
    PolicyIn
    | WorkloadIn
    | WindowIn
    | CheckpointIn
    | DecideIn
    | RestartIn
    | NodeIn
    | NodeDeletedIn
    | DecidePoolIn
    | QuotaIn
    | QueueIn
    | RecommendationIn
    | AssignIn
)


class Journal:
    def __init__(self, path: Path) -> None:
        self._file: IO[bytes] = path.open("ab", buffering=1 << 16)
        self._enc = msgspec.json.Encoder()
        # A SIGKILL can cut the last line short: the newline ends it before this run's entries.
        self._file.write(b"\n")
        self._write(RestartIn())

    def _write(self, entry: Entry) -> None:
        self._file.write(self._enc.encode(entry) + b"\n")

    def policy(self, key: str, policy: ScalingPolicy | None) -> None:
        self._write(PolicyIn(key, policy))

    def workload(self, state: WorkloadState) -> None:
        self._write(WorkloadIn(state))

    def window(self, window: LoadWindow) -> None:
        self._write(WindowIn(window))

    def checkpoint(self, cp: DeciderCheckpoint) -> None:
        self._write(CheckpointIn(cp))

    def node(self, node: NodeState) -> None:
        self._write(NodeIn(node))

    def node_deleted(self, name: str) -> None:
        self._write(NodeDeletedIn(name))

    def quota(self, key: str, quota: QuotaState | None) -> None:
        self._write(QuotaIn(key, quota))

    def queue(self, key: str, queue: QueueState | None) -> None:
        self._write(QueueIn(key, queue))

    def recommendation(self, rec: Recommendation) -> None:
        self._write(RecommendationIn(rec))

    def assign(self, own: Ownership, at: float) -> None:
        self._write(
            AssignIn(
                own.load_partitions,
                sorted(own.load),
                own.recommendation_partitions,
                sorted(own.recommendations),
                at,
            )
        )
        self._file.flush()

    def decide_pool(self, pool: str, now: float) -> None:
        self._write(DecidePoolIn(pool, now))
        self._file.flush()

    def decide(self, workload: str, now: float) -> None:
        self._write(DecideIn(workload, now))
        self._file.flush()

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read(path: Path) -> Iterator[Entry]:
    dec = msgspec.json.Decoder(Entry)
    with path.open("rb") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                yield dec.decode(line)
            except msgspec.DecodeError:
                # Only a line a SIGKILL cut short (the next run's RestartIn follows it).
                log.warning("journal %s: skipping a cut line (%d bytes)", path, len(line))


def replay(
    entries: Iterator[Entry], new_core: Callable[[], DeciderCore]
) -> Iterator[tuple[DecideIn | DecidePoolIn, Outputs]]:
    """Feed a journal to fresh cores (a new one at each restart); yields each decide step
    (a workload's, or a pool's stage 2) with what it produced."""
    core = new_core()
    for e in entries:
        if isinstance(e, RestartIn):
            core = new_core()
        elif isinstance(e, PolicyIn):
            core.on_policy(e.key, e.policy)
        elif isinstance(e, WorkloadIn):
            core.on_workload(e.state)
        elif isinstance(e, WindowIn):
            core.on_window(e.window)
        elif isinstance(e, CheckpointIn):
            core.on_checkpoint(e.checkpoint)
        elif isinstance(e, NodeIn):
            core.on_node(e.node)
        elif isinstance(e, NodeDeletedIn):
            core.on_node_deleted(e.name)
        elif isinstance(e, QuotaIn):
            core.on_quota(e.key, e.quota)
        elif isinstance(e, QueueIn):
            core.on_queue(e.key, e.queue)
        elif isinstance(e, RecommendationIn):
            core.on_recommendation(e.recommendation)
        elif isinstance(e, AssignIn):
            core.assign(e.ownership(), e.at)
        elif isinstance(e, DecidePoolIn):
            yield e, core.decide_pool(e.pool, e.now)
        else:
            yield e, core.decide(e.workload, e.now)


def stage2_path(path: Path) -> Path:
    """Where the service journals its stage-2 core, beside `path` (its stage-1 core's)."""
    return path.with_name(path.name + ".stage2")


def replayed_decisions(path: Path) -> list[ScaleDecision]:
    """Every decision the journals at `path` (stage 1's: pass-through) and beside it (stage
    2's) replay to, stage by stage, each in order."""
    stages = (
        (path, lambda: DeciderCore(role="stage1")),
        (stage2_path(path), lambda: DeciderCore(role="stage2")),
    )
    return [
        d
        for journal, core in stages
        if journal.exists()
        for _, out in replay(read(journal), core)
        for d in ([out.decision] if out.decision else []) + out.decisions
    ]
