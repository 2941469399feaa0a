"""The faults of a chaos run, by name: each injects, is held, and heals (harness.Fault).

sigkill-<service>-<i>      SIGKILL one instance (its process group), start it again (the
                           cluster collectors too: one of the two is the Lease's leader)
sigkill-both-<service>     SIGKILL both instances of a service together, start both (the two
                           cluster collectors too: no leader until one takes the Lease again)
broker-kill                SIGKILL the broker, start it again (kafka.sh up, data kept)
apiserver-restart          stop the devcluster process (kube-apiserver + etcd), start it again
metric-source-outage       every metric source down for 20 s: the Prometheus the pulled workloads'
                           policies query is stopped (prom.py), the simulator's pushes stop
node-unhealthy             a node of the pool NotReady with the unreachable taint for 20 s
decider-broker-latency-2s         (Toxiproxy) 2 s each way between the deciders and the broker, 20 s
decider-broker-partition-20s      (Toxiproxy) the deciders cut off from the broker for 20 s
actuator-apiserver-latency-2s     (Toxiproxy) 2 s each way between the actuators and the API server
actuator-apiserver-partition-20s  (Toxiproxy) the actuators cut off from the API server for 20 s

A partition is Toxiproxy's `timeout` toxic (bytes held, connections left open: a dropped route),
not a refused connection. The network faults need the run's `Network` (harness.network).
"""

from __future__ import annotations

import asyncio

from governor_tools.demo import scenario as sc
from tests.chaos.harness import CLUSTER_COLLECTOR, PAIRED, ChaosRun, Fault

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


async def _sources_down(run: ChaosRun) -> None:
    run.kubelet.muted = True
    await asyncio.to_thread(run.prom.server.stop)


async def _sources_up(run: ChaosRun) -> None:
    await asyncio.to_thread(run.prom.server.start)
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


def _toxic(proxy: str, kind: str) -> Fault:
    def name_of(run: ChaosRun) -> str:
        assert run.net is not None, "network faults need ChaosRun(net=...)"
        return run.net.kafka_proxy if proxy == "kafka" else run.net.apiserver_proxy

    async def inject(run: ChaosRun) -> None:
        assert run.net is not None
        if kind == "latency":
            await run.net.toxiproxy.latency(name_of(run), ms=2000)
        else:
            await run.net.toxiproxy.partition(name_of(run))

    async def heal(run: ChaosRun) -> None:
        assert run.net is not None
        await run.net.toxiproxy.heal(name_of(run))

    who = "decider-broker" if proxy == "kafka" else "actuator-apiserver"
    label = f"{who}-latency-2s" if kind == "latency" else f"{who}-partition-20s"
    return Fault(label, inject, heal, hold_s=OUTAGE_S)


def network_faults() -> list[Fault]:
    return [_toxic(p, k) for p in ("kafka", "apiserver") for k in ("latency", "partition")]


def all_faults(with_network: bool = True) -> list[Fault]:
    """Every fault once, in the order `bench/chaos.py --short` runs them."""
    out = [_kill(name, (i,)) for name in (*PAIRED, CLUSTER_COLLECTOR) for i in (0, 1)]
    out += [_kill(name, (0, 1)) for name in (*PAIRED, CLUSTER_COLLECTOR)]
    out += [
        Fault("broker-kill", _broker_down, _broker_up),
        Fault("apiserver-restart", _apiserver_down, _apiserver_up),
        Fault("metric-source-outage", _sources_down, _sources_up, hold_s=OUTAGE_S),
        Fault("node-unhealthy", _node_down, _node_up, hold_s=OUTAGE_S, nodes_out=(UNHEALTHY,)),
    ]
    return out + (network_faults() if with_network else [])


def by_name(name: str) -> Fault:
    return next(f for f in all_faults() if f.name == name)
