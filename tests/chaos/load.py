"""The chaos run's workloads, their trace-driven load, and the fault-free reference.

Workloads: `WEB` Deployments (the demo's web-service shape, small pods) and the demo's elastic
PyTorchJob, in the demo's namespace, pool and nodes. Policies are the demo's (`web_policy`,
`training_policy`) at the run's speed, with the request-rate metric alone (no metrics.k8s.io).

Load: each web service's offered load is a step function of wall time. Its levels come from a
built-in trace (one row per level, each service reading the trace at its own offset), mapped onto
[BASE, PEAK] requests per second; the level moves on at `LoadPlan.advance` -- the harness calls it
when it injects a fault, so the load changes while governor is impaired and has to be caught up
after the heal. The training job's queue is constant (`TRAIN_QUEUE`, more than its maximum).

Reference: the same load, in trace time, replayed through the pure cores by the simulator
(`governor_tools.sim.replay`, the demo report's config and policy) from the same warm start: the
spec replicas a fault-free governor asks for at each instant. The job's reference is its maximum
(there is room for it on the pool throughout; nothing contends for its GPUs).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from governor_tools.demo import scenario as sc
from governor_tools.demo.report import sim_config, sim_policy
from governor_tools.sim import traces
from governor_tools.sim.replay import replay
from governor_tools.sim.runs import policy_evaluate

SPEED = 10.0  # trace seconds per wall second (the demo's default)
WEB = 20
BASE, PEAK = 4.0, 40.0  # requests per second: 1..6 replicas at 7 rps per pod
TRACE = "alibaba-2018-cpu"
SAMPLE_STEP = 5.0  # trace seconds between the rows of the replayed load


def web_services(n: int = WEB) -> tuple[sc.WebService, ...]:
    return tuple(
        sc.WebService(f"web-{i:02d}", priority=100, min_replicas=1, max_replicas=10,
                      base_load=BASE, peak_load=PEAK, cpu=0.5, memory_gi=0.5)
        for i in range(n)
    )  # fmt: skip


def web_policy(s: sc.WebService, ts: sc.TimeScale) -> dict[str, object]:
    """The demo's policy with the request-rate metric alone."""
    obj = sc.web_policy(s, ts)
    obj["spec"]["metrics"] = obj["spec"]["metrics"][:1]
    return obj


def _levels() -> list[float]:
    """The trace's rows as quantiles (rank / rows): levels spread over the whole [BASE, PEAK]."""
    values = traces.load(traces.BUILTIN_PREFIX + TRACE).values
    order = sorted(range(len(values)), key=values.__getitem__)
    rank = [0.0] * len(values)
    for r, i in enumerate(order):
        rank[i] = r / max(1, len(values) - 1)
    return rank


@dataclass
class LoadPlan:
    """Each service's load over wall time: level k from `t0` (or the k-th `advance`) on."""

    services: tuple[sc.WebService, ...]
    t0: float = 0.0  # wall time of trace second 0 (the start of the replay)
    changes: list[float] = field(default_factory=list)  # wall times of each advance
    _norm: list[float] = field(default_factory=_levels)

    def level(self, i: int, k: int) -> float:
        s = self.services[i]
        stride = max(1, len(self._norm) // 97)  # levels far enough apart in the trace to differ
        x = self._norm[(i * 31 * stride + k * stride) % len(self._norm)]
        return s.base_load + (s.peak_load - s.base_load) * x

    def step_at(self, now: float) -> int:
        return bisect.bisect_right(self.changes, now)

    def load(self, name: str, now: float) -> float:
        i = next(i for i, s in enumerate(self.services) if s.name == name)
        return self.level(i, self.step_at(now))

    def advance(self, now: float) -> None:
        self.changes.append(now)

    def initial(self, s: sc.WebService) -> int:
        return sc.initial_replicas(s, self.level(self.services.index(s), 0))


@dataclass(frozen=True)
class Reference:
    """Spec replicas a fault-free governor asks for, per workload, over wall time."""

    t0: float
    rows: dict[str, tuple[list[float], list[int]]]  # workload -> (trace seconds, replicas)
    job: int = sc.TRAINING.max_replicas

    def __call__(self, workload: str, wall: float) -> int:
        if workload not in self.rows:
            return self.job
        ts, replicas = self.rows[workload]
        i = bisect.bisect_right(ts, (wall - self.t0) * SPEED) - 1
        return replicas[max(0, i)]


def reference(plan: LoadPlan, until: float) -> Reference:
    """The plan's load up to wall time `until`, replayed through the pure cores in trace time."""
    config, evaluate = sim_config(), policy_evaluate()
    end = max(SAMPLE_STEP * 2, (until - plan.t0) * SPEED)
    stamps = [k * SAMPLE_STEP for k in range(math.ceil(end / SAMPLE_STEP) + 1)]
    rows: dict[str, tuple[list[float], list[int]]] = {}
    for s in plan.services:
        values = [plan.load(s.name, plan.t0 + t / SPEED) for t in stamps]
        trace = traces.from_rows(s.name, stamps, values, SAMPLE_STEP)
        run = replay(s.name, trace, sim_policy(s), config, evaluate=evaluate,
                     initial=plan.initial(s))  # fmt: skip
        rows[s.workload] = (
            [r.timestamp for r in run.rows],
            [r.replicas_requested for r in run.rows],
        )
    return Reference(plan.t0, rows)
