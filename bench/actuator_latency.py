"""Decision -> patch latency of governor-actuator for N workloads on a real API server.

    uv run python bench/actuator_latency.py [--workloads 100] [--rounds 3] [--qps 200]

Sets up N Deployments with ScalingPolicies in a fresh namespace of the dev control plane
(`deploy/devcluster/devcluster.sh up`, or --kubeconfig), starts `governor-actuator` as a process
on fresh Kafka topics (--bootstrap, default the local broker), warms it with one decision per
workload, then measures rounds of one decision per workload:

* burst: all N decisions produced at once (a pool-wide rebalance);
* paced: one decision every --interval-ms (steady traffic).

decision->patch is `Actuation.at - ScaleDecision.decided_at`: from the decider's timestamp to the
API server's answer to the fenced patch, Kafka included. Not a timed test; CI does not run it.

Measured 2026-11-29 on the shared 2-core dev machine (load average 2.5-5 from other jobs), dev
control plane (kube-apiserver v1.36.3 + etcd 3.6), local Kafka 4, actuator as a process,
qps 200 / side_qps 20, 100 workloads x 5 rounds (ms, decision->patch):

    paced (50/s)   p50 17-26   p90 24-258   p99 49-774
    burst (100)    p50 402-924 p90 933-1305 p99 1145-1385   (all 100 patched in 1.0-1.4 s)

Before status and Events had their own budget (they shared `qps` with the patches) paced p99
was 2.2-5 s: side writes saturated the budget. With --no-side-writes: paced p50 18, p99 66.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import yaml
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from benchkit import component_up

from governor import bus
from governor.events import DECISIONS, Actuation, Reason, ScaleDecision
from governor.kube import Kube, KubeError, connect

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.support.policies import average_metric, scaling_policy_obj  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, round(q / 100 * (len(s) - 1))))
    return s[k]


async def setup(kube: Kube, ns: str, n: int) -> list[str]:
    crd = yaml.safe_load((REPO / "deploy/k8s/crds/scalingpolicy.yaml").read_text())
    await kube.apply(crd, field_manager="bench")
    for _ in range(100):
        try:
            await kube.resource("governor.dev/v1alpha1", "ScalingPolicy")
            break
        except KubeError:
            kube._resources.clear()
            await asyncio.sleep(0.2)
    await kube.create("v1", "namespaces", {"metadata": {"name": ns}})
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> str:
        name = f"w{i:03d}"
        labels = {"app": name}
        async with sem:
            await kube.apply(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {
                        "replicas": 1,
                        "selector": {"matchLabels": labels},
                        "template": {
                            "metadata": {"labels": labels},
                            "spec": {"containers": [{"name": "a", "image": "pause"}]},
                        },
                    },
                },
                field_manager="bench",
            )
            target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
            spec = {"minReplicas": 1, "maxReplicas": 50, "metrics": [average_metric()]}
            await kube.apply(
                scaling_policy_obj(ns, name, targetRef=target, **spec), field_manager="bench"
            )
        return f"{ns}/Deployment/{name}"

    return list(await asyncio.gather(*(one(i) for i in range(n))))


@dataclasses.dataclass
class Collector:
    bootstrap: str
    topic: str
    got: dict[str, tuple[Actuation, float]] = dataclasses.field(default_factory=dict)

    async def run(self) -> None:
        dec = msgspec.json.Decoder(Actuation)
        c = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
        )
        await c.start()
        try:
            while True:
                for recs in (await c.getmany(timeout_ms=50)).values():
                    now = time.time()
                    for r in recs:
                        a = dec.decode(r.value)
                        self.got[a.decision_id] = (a, now)
        finally:
            await c.stop()

    async def wait(self, ids: list[str], within_s: float = 300) -> None:
        deadline = time.monotonic() + within_s
        while not all(i in self.got for i in ids):
            if time.monotonic() > deadline:
                missing = [i for i in ids if i not in self.got]
                raise TimeoutError(f"{len(missing)} decisions without an actuation")
            await asyncio.sleep(0.02)


def make(workload: str, seq: int, to: int) -> ScaleDecision:
    now = time.time()
    return ScaleDecision(
        decision_id=f"bench-{uuid.uuid4().hex[:10]}",
        workload=workload,
        seq=seq,
        from_replicas=0,
        to_replicas=to,
        reasons=[Reason("metric", "bench")],
        inputs=[],
        policy_generation=1,
        newest_input=now,
        decided_at=now,
        policy=workload.replace("/Deployment/", "/"),
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--qps", type=float, default=200.0)
    ap.add_argument("--burst", type=int, default=200)
    ap.add_argument("--kubeconfig", type=Path)
    ap.add_argument("--bootstrap", default=bus.default_bootstrap())
    ap.add_argument(
        "--no-side-writes",
        action="store_true",
        help="no Events and no ScalingPolicy status (patches only), to see what they cost",
    )
    ap.add_argument(
        "--in-process", action="store_true", help="run the actuator's Service in this process"
    )
    args = ap.parse_args()

    kubeconfig = args.kubeconfig or Path(component_up("devcluster/devcluster.sh"))
    api = await connect(kubeconfig)
    kube = Kube(api)
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    workloads = await setup(kube, ns, args.workloads)
    took = time.monotonic() - t0
    print(f"setup: {len(workloads)} Deployments + ScalingPolicies in {ns} ({took:.1f}s)")

    suffix = uuid.uuid4().hex[:8]
    dtopic, atopic = f"bench.decisions.{suffix}", f"bench.actuations.{suffix}"
    admin = AIOKafkaAdminClient(bootstrap_servers=args.bootstrap)
    await admin.start()
    await admin.create_topics(
        [
            NewTopic(t, num_partitions=6, replication_factor=1)
            for t in (dtopic, atopic, f"{dtopic}.dlq")
        ]
    )
    await admin.close()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = Path(tempfile.mkdtemp(prefix="actuator-bench-"))
    cfg = {
        "kafka": {"bootstrap": args.bootstrap},
        "group_id": f"bench-{suffix}",
        "decisions_topic": dtopic,
        "actuations_topic": atopic,
        "kubeconfig": str(kubeconfig),
        "allowed_namespaces": [ns],
        "qps": args.qps,
        "burst": args.burst,
        "log_level": "WARNING",
        "http": {"host": "127.0.0.1", "port": port},
        "events": not args.no_side_writes,
        "write_status": not args.no_side_writes,
    }
    (workdir / "config.yaml").write_text(yaml.safe_dump(cfg))
    log = (workdir / "actuator.log").open("wb")
    proc: subprocess.Popen[bytes] | None = None
    service: Any = None
    runner: asyncio.Task[None] | None = None
    if args.in_process:
        from governor_actuator.config import ActuatorSettings
        from governor_actuator.main import Service

        service = Service(msgspec.convert(cfg, ActuatorSettings))
        await service.start()
        runner = asyncio.create_task(service.run())
    else:
        exe = Path(sys.executable).parent / "governor-actuator"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GOVERNOR_ACTUATOR_")}
        proc = subprocess.Popen(  # noqa: ASYNC220 - started once
            [str(exe), "--config", str(workdir / "config.yaml")], stdout=log, stderr=log, env=env
        )
    collector = Collector(args.bootstrap, atopic)
    ctask = asyncio.create_task(collector.run())
    producer = bus.Producer(args.bootstrap, client_id="bench")
    await producer.start()
    topic = dataclasses.replace(DECISIONS, name=dtopic)
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                try:
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        seq = 1
        # warm-up: caches (policies, owners, discovery), connections
        warm = [make(w, seq, 2) for w in workloads]
        for d in warm:
            await producer.publish(topic, d)
        await producer.flush()
        await collector.wait([d.decision_id for d in warm])

        results: dict[str, list[tuple[float, float]]] = {"burst": [], "paced": []}
        outcomes: dict[str, int] = {}
        for r in range(args.rounds):
            for mode in ("burst", "paced"):
                seq += 1
                batch = []
                t_start = time.time()
                for w in workloads:
                    d = make(w, seq, 2 + (seq % 7))
                    batch.append(d)
                    await producer.publish(topic, d)
                    if mode == "paced":
                        await producer.flush()
                        await asyncio.sleep(args.interval_ms / 1000)
                await producer.flush()
                await collector.wait([d.decision_id for d in batch])
                span = max(collector.got[d.decision_id][0].at for d in batch) - t_start
                for d in batch:
                    a, seen = collector.got[d.decision_id]
                    outcomes[a.outcome] = outcomes.get(a.outcome, 0) + 1
                    results[mode].append((a.at - d.decided_at, seen - d.decided_at))
                print(f"round {r + 1} {mode}: {len(batch)} decisions applied in {span:.2f}s")
        print(f"\noutcomes: {outcomes}   (workloads={args.workloads}, qps budget={args.qps})")
        print(
            f"{'mode':<7} {'n':>4} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}   "
            f"(decision->patch; +Kafka back to a reader: p50/p99)"
        )
        for mode, vals in results.items():
            patch = [v[0] * 1000 for v in vals]
            e2e = [v[1] * 1000 for v in vals]
            p50, p90, p99 = (percentile(patch, q) for q in (50, 90, 99))
            print(
                f"{mode:<7} {len(patch):>4} {p50:>8.1f} {p90:>8.1f} {p99:>8.1f} {max(patch):>8.1f}"
                f"   {percentile(e2e, 50):.1f}/{percentile(e2e, 99):.1f}"
            )
        mean = statistics.mean(v[0] for v in results["paced"]) * 1000
        print(f"mean decision->patch, paced: {mean:.1f} ms")
    finally:
        await producer.stop()
        ctask.cancel()
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        if service is not None and runner is not None:
            service.request_stop()
            await runner
            await service.stop()
        log.close()
        await api.close()


if __name__ == "__main__":
    asyncio.run(main())
