"""The faults of a chaos run, by name: each injects, is held, and heals (harness.Fault).

sigkill-<service>-<i>      SIGKILL one instance (its process group), start it again
sigkill-both-<service>     SIGKILL both instances of a service together, start both
broker-kill                SIGKILL the broker, start it again (kafka.sh up, data kept)
apiserver-restart          stop the devcluster process (kube-apiserver + etcd), start it again
metric-source-outage       the workload simulator stops reporting samples for 20 s
node-unhealthy             a node of the pool NotReady with the unreachable taint for 20 s
"""

from __future__ import annotations

import asyncio

from governor_tools.demo import scenario as sc
from tests.chaos.harness import PAIRED, ChaosRun, Fault

OUTAGE_S = 20.0
UNHEALTHY = sc.node_names()[-1]
TAINT = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}


def _kill(name: str, which: tuple[int, ...]) -> Fault:
    async def inject(run: ChaosRun) -> None:
        for i in which:
            run.services[name][i].kill9()

    async def heal(run: ChaosRun) -> None:
        for i in which:
            await asyncio.to_thread(run.services[name][i].start)

    label = f"sigkill-both-{name}" if len(which) == 2 else f"sigkill-{name}-{which[0]}"
    return Fault(label, inject, heal)


async def _broker_down(run: ChaosRun) -> None:
    await asyncio.to_thread(run.broker.kill9)


async def _broker_up(run: ChaosRun) -> None:
    await asyncio.to_thread(run.broker.start)


async def _apiserver_down(run: ChaosRun) -> None:
    await asyncio.to_thread(run.control_plane.stop)


async def _apiserver_up(run: ChaosRun) -> None:
    await asyncio.to_thread(run.control_plane.start)


async def _mute(run: ChaosRun) -> None:
    run.kubelet.muted = True


async def _unmute(run: ChaosRun) -> None:
    run.kubelet.muted = False


async def _node(run: ChaosRun, ready: bool) -> None:
    status = "True" if ready else "False"
    reason = "KubeletReady" if ready else "NodeStatusUnknown"
    await run.kube.merge_patch(
        "v1", "nodes", UNHEALTHY,
        {"status": {"conditions": [{"type": "Ready", "status": status, "reason": reason}]}},
        subresource="status",
    )  # fmt: skip
    await run.kube.merge_patch(
        "v1", "nodes", UNHEALTHY, {"spec": {"taints": [] if ready else [TAINT]}}
    )


async def _node_down(run: ChaosRun) -> None:
    await _node(run, ready=False)


async def _node_up(run: ChaosRun) -> None:
    await _node(run, ready=True)


def all_faults() -> list[Fault]:
    """Every fault once, in the order `bench/chaos.py --short` runs them."""
    out = [_kill(name, (i,)) for name in PAIRED for i in (0, 1)]
    out += [_kill(name, (0, 1)) for name in PAIRED]
    out += [
        Fault("broker-kill", _broker_down, _broker_up),
        Fault("apiserver-restart", _apiserver_down, _apiserver_up),
        Fault("metric-source-outage", _mute, _unmute, hold_s=OUTAGE_S),
        Fault("node-unhealthy", _node_down, _node_up, hold_s=OUTAGE_S),
    ]
    return out


def by_name(name: str) -> Fault:
    return next(f for f in all_faults() if f.name == name)
