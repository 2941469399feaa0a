"""The chaos run: the real broker and kube-apiserver, two instances of every service, the
demo's workload simulator (governor_tools.demo.kubelet) driving `load.LoadPlan`, and a record
of everything the checks read.

`ChaosRun` is an async context manager: it installs the workloads, starts the services (two
collectors, aggregators, deciders and actuators, each pair in one consumer group; two cluster
collectors on one Lease, of which only the leader publishes), the Prometheus the first
`prom.PULLED` services' policies query (prom.py; the simulator pushes for the others), the
simulator, the recorder
(decisions, Actuations and load windows from the topics) and the sampler (every target's spec
replicas and seq annotation from the API server). `episode(fault)` moves the load on, injects
the fault, holds it, heals it, waits for convergence to the reference and returns the fault's
`Verdict`. Faults are in faults.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import yaml

from governor import events
from governor.bus import Consumer
from governor.kube import Kube, KubeError, connect, resource_path
from governor.policy.actuation import ANN_SEQ
from governor.topics import ensure_topics
from governor.windows import views
from governor_decider import journal
from governor_tools.demo import scenario as sc
from governor_tools.demo.kubelet import Kubelet
from governor_tools.demo.kwatch import Watch
from governor_tools.demo.run import install
from governor_tools.toxiproxy import Toxiproxy
from tests.chaos import checks
from tests.chaos.load import (
    SAMPLE_STEP,
    SPEED,
    LoadPlan,
    Reference,
    reference,
    web_policy,
    web_services,
)
from tests.chaos.pool import PoolInputs, pool_reference
from tests.chaos.prom import PULLED, PromSource
from tests.support.procs import Service, governor_service

REPO = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO / "deploy" / "kafka" / "kafka.sh"
DEVCLUSTER_SH = REPO / "deploy" / "devcluster" / "devcluster.sh"
TOXIPROXY_SH = REPO / "deploy" / "toxiproxy" / "toxiproxy.sh"
PAIRED = ("collector", "aggregator", "decider", "actuator")
CLUSTER_COLLECTOR = "cluster-collector"  # two, Lease-elected: only the leader publishes
MAX_WAIT_S = 60.0  # after the heal: converge_s is this when the run never converged
SAMPLE_S = 0.5


def script(path: Path, verb: str, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    """deploy/kafka/kafka.sh or deploy/devcluster/devcluster.sh; the last stdout line."""
    done = subprocess.run(
        ["bash", str(path), verb], env={**os.environ, **(env or {})}, capture_output=True,
        text=True, timeout=timeout, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{path.name} {verb}: {done.stderr.strip()[-800:]}")
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


@dataclass
class Broker:
    """The local broker of `env` (kafka.sh's ports): SIGKILL and start again."""

    env: dict[str, str] = field(default_factory=dict)

    def kill9(self) -> None:
        status = subprocess.run(
            ["bash", str(KAFKA_SH), "status"], env={**os.environ, **self.env},
            capture_output=True, text=True, check=False,
        ).stdout.split()  # fmt: skip
        pid = int(status[status.index("pid") + 1])
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}").exists():
            time.sleep(0.1)

    def start(self) -> None:
        script(KAFKA_SH, "up", self.env)


class ControlPlane:
    """The devcluster process (kube-apiserver + embedded etcd): stop and start, state kept."""

    def stop(self) -> None:
        script(DEVCLUSTER_SH, "down", timeout=120)

    def start(self) -> None:
        script(DEVCLUSTER_SH, "up", timeout=600)


def _settings(name: str, i: int, tag: str, out: Path, kubeconfig: Path) -> dict[str, str]:
    """Service `name`'s settings for instance `i` of run `tag`: the pair shares its group."""
    ts = sc.TimeScale(SPEED)
    stable, panic = ts.wall(sc.TRACE_STABLE_WINDOW), ts.wall(sc.TRACE_PANIC_WINDOW)
    kube = str(kubeconfig)
    if name == "collector":
        return {"HTTP_HOST": "127.0.0.1", "KUBECONFIG": kube}
    if name == "cluster-collector":
        # Two instances on one Lease (this run's, so an earlier run's holder does not count);
        # client-go's 15/10/2 s over 2.5 so a killed leader is replaced within the 30 s target.
        return {
            "KUBECONFIG": kube, "METRICS_HOST": "127.0.0.1", "COALESCE_MS": "100",
            "LEASE_NAME": f"chaos-cc-{tag}", "LEASE_DURATION_SECONDS": "6",
            "RENEW_DEADLINE_SECONDS": "4", "RETRY_PERIOD_SECONDS": "0.8",
        }  # fmt: skip
    if name == "aggregator":
        return {
            "APP_ID": f"chaos-agg-{tag}", "DATA_DIR": str(out / f"aggregator-{i}"),
            "STABLE_WINDOW_SECONDS": f"{stable:g}", "STABLE_HOP_SECONDS": f"{stable / 4:g}",
            "PANIC_WINDOW_SECONDS": f"{panic:g}", "PANIC_HOP_SECONDS": f"{panic / 2:g}",
            "ALLOWED_LATENESS_SECONDS": f"{min(2.0, panic / 2):g}", "PUBLISH_INTERVAL_MS": "200",
        }  # fmt: skip
    if name == "decider":
        return {
            "GROUP_ID": f"chaos-dec-{tag}", "POLICY_SOURCE": "cluster", "TICK_SECONDS": "0.5",
            "STEP_SECONDS": f"{ts.wall(sc.TRACE_DECISION_STEP):g}",
            "PENDING_GRACE_SECONDS": f"{max(5.0, ts.wall(sc.TRACE_PENDING_GRACE)):g}",
            "JOURNAL": str(out / f"decider-{i}.journal"),
            "GROUP_INSTANCE_ID": f"chaos-dec-{tag}-{i}",
        }  # fmt: skip
    config = out / "actuator.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "allowed_namespaces": [sc.NAMESPACE],
                "group_id": f"chaos-act-{tag}",
                "policy_ttl_seconds": 1.0,
            }
        )
    )
    return {"KUBECONFIG": kube, "HTTP__HOST": "127.0.0.1", "CONFIG": str(config)}


@dataclass
class Network:
    """Toxiproxy between the deciders and the broker (they bootstrap at the broker's listener
    advertised at the proxy, so they stay behind it when they reconnect), and between the
    actuators and the kube-apiserver (their kubeconfig's server is the proxy)."""

    toxiproxy: Toxiproxy
    kafka_proxy: str
    decider_bootstrap: str
    apiserver_proxy: str
    actuator_kubeconfig: Path


def _proxied_kubeconfig(kubeconfig: Path, listen: str, out: Path) -> tuple[str, Path]:
    """(the API server's host:port, a copy of `kubeconfig` whose server is `listen`)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    api = str(cluster["server"]).removeprefix("https://")
    cluster["server"] = f"https://{listen}"
    proxied = out / "actuator.kubeconfig"
    proxied.write_text(yaml.safe_dump(config))
    return api, proxied


async def network(
    toxiproxy: Toxiproxy,
    kafka: tuple[str, str],
    kubeconfig: Path,
    apiserver_listen: str,
    out: Path,
) -> Network:
    """Proxies `kafka` = (listen: the advertised proxy address, upstream: the broker's
    proxied listener) and the API server (at `apiserver_listen`); a kubeconfig through it."""
    listen, upstream = kafka
    names = ("chaos-kafka", "chaos-apiserver")
    existing = await toxiproxy.proxies()
    for name in names:
        if name in existing:
            await toxiproxy.delete(name)
    await toxiproxy.create(names[0], listen=listen, upstream=upstream)
    api, proxied = _proxied_kubeconfig(kubeconfig, apiserver_listen, out)
    await toxiproxy.create(names[1], listen=apiserver_listen, upstream=api)
    return Network(toxiproxy, names[0], listen, names[1], proxied)


@dataclass
class Recorder:
    """Everything on the decisions, audit and load topics about the run's namespace."""

    bootstrap: str
    decisions: list[events.ScaleDecision] = field(default_factory=list)
    actuations: list[events.Actuation] = field(default_factory=list)
    closed: list[checks.ClosedWindow] = field(default_factory=list)

    async def run(self) -> None:
        topics: list[events.Topic[Any]] = [events.DECISIONS, events.ACTUATIONS, events.LOAD]
        consumer = Consumer(self.bootstrap, topics, group_id=None, check_keys=False)
        await consumer.start()
        mine = f"{sc.NAMESPACE}/"
        try:
            while True:
                for m in await consumer.poll(500):
                    v = m.value
                    if v is None or not v.workload.startswith(mine):
                        continue
                    if isinstance(v, events.ScaleDecision):
                        self.decisions.append(v)
                    elif isinstance(v, events.Actuation):
                        self.actuations.append(v)
                    elif isinstance(v, events.LoadWindow):
                        self.closed += [
                            checks.ClosedWindow(v.workload, w.window, w.start, w.end)
                            for w in views(v) if w.closed
                        ]  # fmt: skip
        finally:
            await consumer.stop()


def evaluated(out: Path) -> set[tuple[str, str, float]]:
    """Every closed window some decider's stage 1 read (the deciders' journals of inputs)."""
    keys: set[tuple[str, str, float]] = set()
    for path in out.glob("decider-*.journal"):
        for e in journal.read(path):
            if isinstance(e, journal.WindowIn):
                keys |= {(w.workload, w.window, w.start) for w in views(e.window) if w.closed}
    return keys


def _replicas(obj: dict[str, Any]) -> int:
    spec = obj.get("spec") or {}
    if "pytorchReplicaSpecs" in spec:
        return int(spec["pytorchReplicaSpecs"]["Worker"].get("replicas", 0))
    return int(spec.get("replicas", 1))


@dataclass
class Sampler:
    """Every target's spec replicas and seq annotation, as the API server has them."""

    kube: Kube
    samples: list[checks.SpecSample] = field(default_factory=list)

    async def run(self) -> None:
        watches = [
            Watch(self.kube, "apps/v1", "deployments", namespace=sc.NAMESPACE),
            Watch(self.kube, "kubeflow.org/v1", "pytorchjobs", namespace=sc.NAMESPACE),
        ]
        tasks = [asyncio.create_task(w.run()) for w in watches]
        kinds = ("Deployment", "PyTorchJob")
        try:
            while True:
                await asyncio.sleep(SAMPLE_S)
                now = time.time()
                for kind, w in zip(kinds, watches, strict=True):
                    for obj in list(w.objects.values()):
                        meta = obj.get("metadata") or {}
                        seq = (meta.get("annotations") or {}).get(ANN_SEQ)
                        self.samples.append(checks.SpecSample(
                            now, f"{sc.NAMESPACE}/{kind}/{meta['name']}", _replicas(obj),
                            int(seq) if seq is not None else None,
                        ))  # fmt: skip
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


class _Kubelet(Kubelet):
    """The demo's simulator, pushing no samples for the workloads a pull source reads."""

    pulled: frozenset[str] = frozenset()  # workload ids

    def samples(self, now: float) -> list[dict[str, Any]]:
        return [x for x in super().samples(now) if x["workload"] not in self.pulled]


Step = Callable[["ChaosRun"], Awaitable[None]]


@dataclass(frozen=True)
class Fault:
    """A fault: `inject`, hold it `hold_s`, `heal`."""

    name: str
    inject: Step
    heal: Step
    hold_s: float = 3.0
    # Nodes the fault takes out of the pool: the reference then allocates the pool
    # (`pool.pool_reference`) and a pool's cut is judged against it, not exempt.
    nodes_out: tuple[str, ...] = ()


@dataclass
class ChaosRun:
    bootstrap: str
    kubeconfig: Path
    out: Path
    broker: Broker
    control_plane: ControlPlane = field(default_factory=ControlPlane)
    tag: str = field(default_factory=lambda: f"{int(time.time())}")
    web: int = 20
    net: Network | None = None
    services: dict[str, list[Service]] = field(default_factory=dict)
    plan: LoadPlan = field(init=False)
    recorder: Recorder = field(init=False)
    kube: Kube = field(init=False)
    kubelet: _Kubelet = field(init=False)
    prom: PromSource = field(init=False)
    sampler: Sampler = field(init=False)
    pool: PoolInputs = field(init=False)  # the pool as the decider's tables have it, warmed up
    # (time, "name-i", exit code) of each instance that exited without being killed, restarted
    restarts: list[tuple[float, str, int | None]] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    @property
    def workloads(self) -> list[str]:
        return [s.workload for s in self.plan.services] + [sc.TRAINING.workload]

    async def __aenter__(self) -> ChaosRun:
        self.out.mkdir(parents=True, exist_ok=True)
        self.plan = LoadPlan(web_services(self.web))
        await ensure_topics(self.bootstrap)
        self.kube = Kube(await self._stack.enter_async_context(await connect(self.kubeconfig)))
        await self._clean()
        pulled = self._start_prometheus()
        loads = {s.name: self.plan.level(i, 0) for i, s in enumerate(self.plan.services)}

        def policy(s: sc.WebService, ts: sc.TimeScale) -> dict[str, Any]:
            obj = web_policy(s, ts)
            return self.prom.policy(obj, s) if s in pulled else obj

        await install(self.kube, sc.TimeScale(SPEED), loads, lambda _: None,
                      services=self.plan.services, policy=policy, with_twins=False)  # fmt: skip
        await asyncio.to_thread(self._start_services)
        ts = sc.TimeScale(SPEED)
        urls = [f"http://127.0.0.1:{c.port}/v1/samples" for c in self.services["collector"]]
        self.kubelet = _Kubelet(
            self.kube, push_url=urls[0], load=self.plan.load, services=self.plan.services,
            push_fallbacks=tuple(urls[1:]),
            sample_period_s=min(0.5, ts.wall(sc.TRACE_SAMPLE_PERIOD)),
            web_startup_s=ts.wall(sc.TRACE_WEB_STARTUP),
            train_startup_s=ts.wall(sc.TRACE_TRAIN_STARTUP),
        )  # fmt: skip
        self.kubelet.pulled = frozenset(s.workload for s in pulled)
        self.recorder = Recorder(self.bootstrap)
        self.sampler = Sampler(self.kube)
        tasks = (("kubelet", self.kubelet.run()), ("recorder", self.recorder.run()),
                 ("sampler", self.sampler.run()), ("restarter", self._restarter()))  # fmt: skip
        for name, coro in tasks:
            self._tasks.append(asyncio.create_task(coro, name=name))
        await self._warm_up()
        self.pool = await PoolInputs.read(self.bootstrap)
        self.plan.t0 = time.time()
        self.kubelet.go_live()
        return self

    def _start_prometheus(self) -> tuple[sc.WebService, ...]:
        """The pull source's Prometheus, and the feed of its gauge: the services it serves."""
        self.prom = PromSource(self.out)
        self.prom.start()
        self._stack.callback(self.prom.stop)
        pulled = self.plan.services[:PULLED]
        feed = self.prom.feed(self.plan, frozenset(s.name for s in pulled))
        self._tasks.append(asyncio.create_task(feed, name="prometheus-feed"))
        return pulled

    async def _clean(self) -> None:
        """No target, pod or policy left in the namespace by an earlier run on this control
        plane: a target's seq annotation would fence this run's first decisions out."""
        collections = [("apps/v1", "deployments"), ("kubeflow.org/v1", "pytorchjobs"),
                       ("v1", "pods"), ("governor.dev/v1alpha1", "scalingpolicies")]  # fmt: skip
        for api_version, plural in collections:
            path = resource_path(api_version, plural, namespace=sc.NAMESPACE)
            with contextlib.suppress(KubeError):  # the CRDs or the namespace not there yet
                await self.kube.request("DELETE", path, query=[("gracePeriodSeconds", "0")])

    def _start_services(self) -> None:
        names = [(n, i) for n in (CLUSTER_COLLECTOR, *PAIRED) for i in range(2)]
        for name, i in names:
            settings = _settings(name, i, self.tag, self.out, self.kubeconfig)
            bootstrap = self.bootstrap
            if self.net is not None and name == "decider":
                bootstrap = self.net.decider_bootstrap
            if self.net is not None and name == "actuator":
                settings["KUBECONFIG"] = str(self.net.actuator_kubeconfig)
            svc = governor_service(name, bootstrap, settings, self.out / f"{name}-{i}.log")
            self.services.setdefault(name, []).append(svc.start())

    async def _warm_up(self) -> None:
        deadline = time.monotonic() + 120
        while not all(s.spec > 0 and s.ready == s.spec for s in self.kubelet.snapshot().values()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"initial pods not ready in 120 s: {self.kubelet.snapshot()}")
            await asyncio.sleep(0.3)

    async def __aexit__(self, *exc: object) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.to_thread(self.stop_services)
        await self._stack.aclose()

    async def _restarter(self) -> None:
        """What a Deployment's `restartPolicy: Always` does for a pod: an instance that exits on
        its own (the aggregator stops when load windows may be undelivered, e.g. a broker down
        longer than its producer's request timeout) is started again, after kubelet's 10 s
        first back-off scaled like the run's other durations. A killed one is left to its fault."""
        backoff_s = sc.TimeScale(SPEED).wall(10.0)
        while True:
            await asyncio.sleep(backoff_s)
            for name, pair in self.services.items():
                for i, svc in enumerate(pair):
                    if not svc.exited_unasked():
                        continue
                    self.restarts.append(
                        (time.time(), f"{name}-{i}", svc.proc and svc.proc.returncode)
                    )
                    with contextlib.suppress(RuntimeError, TimeoutError):  # next round retries
                        await asyncio.to_thread(svc.start)

    def stop_services(self) -> None:
        for pair in self.services.values():
            for s in pair:
                s.stop()

    def alive(self) -> dict[str, int]:
        """pid of every running service instance, by `name-i`."""
        return {f"{n}-{i}": s.proc.pid for n, pair in self.services.items()
                for i, s in enumerate(pair) if s.proc and s.proc.poll() is None}  # fmt: skip

    # --- one fault ---------------------------------------------------------------------------

    async def episode(self, fault: Fault, settle_s: float = 0.0) -> checks.Verdict:
        """Load moves on, the fault is injected, held, healed; then the checks."""
        await asyncio.sleep(settle_s)
        start = time.time()
        before = self._counts(start)
        self.plan.advance(start)
        ref: checks.Reference = reference(self.plan, start + fault.hold_s + MAX_WAIT_S + 120)
        await fault.inject(self)
        await asyncio.sleep(fault.hold_s)
        await fault.heal(self)
        heal = time.time()
        exempt = checks.POOL_CUTS
        if fault.nodes_out:
            window = (start - 1.0, heal, heal + MAX_WAIT_S + checks.CONVERGED_FOR_S + 5.0)
            ref = pool_reference(ref, self.pool, self.workloads, fault.nodes_out, window,
                                 step=SAMPLE_STEP / SPEED)  # fmt: skip
            exempt = frozenset()
        converge: float | None = None
        while converge is None and time.time() - heal < MAX_WAIT_S + checks.CONVERGED_FOR_S:
            await asyncio.sleep(1.0)
            recent = [s for s in self.sampler.samples if s.at >= start - 5]
            converge = checks.convergence(recent, ref, self.workloads, heal)
        end = time.time()
        await asyncio.sleep(3.0)  # the last windows of the episode reach a decider's journal
        after = self._counts(end)
        self._dump(fault.name, start, heal, end, ref)
        return checks.Verdict(
            fault=fault.name,
            converge_s=converge if converge is not None else end - heal,
            converged=converge is not None and converge <= MAX_WAIT_S,
            lost=after["lost"] - before["lost"],
            duplicates=after["duplicates"] - before["duplicates"],
            regressions=after["regressions"] - before["regressions"],
            scale_down_on_missing=checks.scale_downs_on_missing_data(
                self.recorder.decisions, start, heal + 5.0, ref, exempt),
            unaudited=after["unaudited"] - before["unaudited"],
            older_input=after["older_input"] - before["older_input"],
            restarts=sum(start <= at <= end for at, _, _ in self.restarts),
        )  # fmt: skip

    def _dump(
        self, name: str, start: float, heal: float, end: float, ref: checks.Reference
    ) -> None:
        """out/episode-<fault>.json: per workload, (t, live, reference) over the episode, and
        the (workload, seq) carried by a target without an applied Actuation."""
        live: dict[str, list[tuple[float, int, int]]] = {}
        for s in self.sampler.samples:
            if start - 2 <= s.at <= end:
                live.setdefault(s.workload, []).append(
                    (round(s.at - heal, 1), s.replicas, ref(s.workload, s.at))
                )
        applied = {(a.workload, a.seq) for a in self.recorder.actuations
                   if a.outcome in checks.AUDITS_A_PATCH}  # fmt: skip
        carried = {(s.workload, s.seq) for s in self.sampler.samples if s.seq is not None}
        missing = sorted(carried - applied)
        near = {(w, q + d) for w, q in missing for d in (-1, 0, 1)}
        audit = [msgspec.to_builtins(a) for a in self.recorder.actuations
                 if (a.workload, a.seq) in near]  # fmt: skip
        decisions = [
            (round(d.decided_at - heal, 1), d.workload, d.seq, d.from_replicas, d.to_replicas,
             round(d.newest_input - heal, 1), [r.rule for r in d.reasons])
            for d in self.recorder.decisions if start - 2 <= d.decided_at <= end
        ]  # fmt: skip
        doc = {
            "decisions": decisions,
            "start": start - heal,
            "end": end - heal,
            "unaudited": missing,
            "audit": audit,
            "live": {w: [x for x in v if x[1] != x[2] or x[0] >= 0] for w, v in live.items()},
        }
        (self.out / f"episode-{name}.json").write_bytes(msgspec.json.encode(doc))

    def _counts(self, until: float) -> dict[str, int]:
        """Each cumulative check over what was recorded up to `until`."""
        acts = [a for a in self.recorder.actuations if a.at <= until]
        samples = [s for s in self.sampler.samples if s.at <= until]
        return {
            "lost": checks.lost_windows(self.recorder.closed, evaluated(self.out), until - 5.0),
            "duplicates": checks.duplicate_patches(acts),
            "regressions": checks.seq_regressions(acts, samples),
            "unaudited": checks.unaudited(samples, self.recorder.actuations),
            "older_input": checks.older_input(
                [d for d in self.recorder.decisions if d.decided_at <= until]
            ),
        }


def rss_kib(pids: dict[str, int]) -> dict[str, int]:
    """Resident set size of each process (its whole process group is one service)."""
    out = {}
    for name, pid in pids.items():
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out[name] = int(line.split()[1])
    return out


__all__ = ["ChaosRun", "Fault", "Reference", "rss_kib"]
