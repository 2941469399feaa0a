"""`governor demo`: set up, run, show, stop, report. See governor.demo for the parts."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import yaml

from governor import events
from governor.bus import Consumer
from governor.front_proxy import front_proxy_trust
from governor.inventory import parse_quantity
from governor.kube import Kube, KubeError, connect
from governor.topics import ensure_topics
from governor_tools.demo import hpa_twin, metrics_api
from governor_tools.demo import scenario as sc
from governor_tools.demo.kubelet import Kubelet
from governor_tools.demo.stack import (
    CRDS,
    Busy,
    Stack,
    StackError,
    exclusive,
    free_port,
    missing_prerequisites,
)
from governor_tools.demo.view import Board, Row, line, table
from governor_tools.sim import traces

Say = Callable[[str], None]
MISSING_PREREQUISITES = 3  # exit code: the Makefile falls back to the simulator-only demo


class Options(msgspec.Struct, frozen=True, kw_only=True):
    duration: float = 180.0  # wall seconds of load replay
    speed: float = 10.0
    trace: str = "alibaba-2018-cpu"
    headless: bool = False
    out: Path = Path("out/demo-stack")


class Sample(msgspec.Struct, frozen=True, array_like=True):
    """One row of the run's timeline (timeline.csv)."""

    wall: float
    trace_seconds: float
    workload: str
    load: float
    spec: int
    ready: int
    desired: int
    gpus_used: int


TIMELINE_HEADER = (
    "wall",
    "trace_seconds",
    "workload",
    "load",
    "spec",
    "ready",
    "desired",
    "gpus_used",
)


# --- cluster objects ---------------------------------------------------------------------------


async def _create(kube: Kube, obj: dict[str, Any]) -> dict[str, Any]:
    return await kube.apply(obj, field_manager="governor-demo")


async def install(
    kube: Kube,
    ts: sc.TimeScale,
    loads: dict[str, float],
    say: Say,
    services: tuple[sc.WebService, ...] = sc.SERVICES,
    policy: Callable[[sc.WebService, sc.TimeScale], dict[str, Any]] = sc.web_policy,
    with_twins: bool = True,
) -> None:
    """CRDs, the namespace, the pool's nodes and devices, `services` (each with `policy`) at
    the replicas their first load asks for, and the training job at its maximum."""
    for path in CRDS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                await _create(kube, doc)
    deadline = time.monotonic() + 60
    for path in CRDS:
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        while True:
            crd = await kube.get("apiextensions.k8s.io/v1", "customresourcedefinitions", name)
            conds = (crd.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise StackError(f"CRD {name} not Established in 60 s")
            await asyncio.sleep(0.2)
    kube.forget_discovery()  # discovery learnt before the CRDs existed
    say("CRDs installed: ScalingPolicy, PyTorchJob, Koordinator Device")
    await _create(
        kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": sc.NAMESPACE}}
    )
    nodes = [sc.node_obj(n) for n in sc.node_names()]
    if with_twins:
        nodes += [hpa_twin.node_obj(n) for n in hpa_twin.node_names()]
    for node in nodes:
        name = node["metadata"]["name"]
        await _create(kube, {k: v for k, v in node.items() if k != "status"})
        await kube.merge_patch(
            "v1", "nodes", name, {"status": node["status"]}, subresource="status"
        )
        if name in sc.node_names():
            await _create(kube, sc.device_obj(name))
    for s in services:
        await _create(kube, sc.deployment_obj(s, sc.initial_replicas(s, loads[s.name])))
        await _create(kube, policy(s, ts))
    if with_twins:
        shadowed = sc.SERVICES[0]
        await _create(kube, sc.shadow_policy(shadowed, ts))
        say(f"shadow policy {shadowed.name}-eager (spec.mode Shadow, {sc.SHADOW_TARGET_PER_POD:g} "
            f"rps/pod) beside {shadowed.name}'s Active one: `governor ab` scores both")  # fmt: skip
        replicas = {s.name: sc.initial_replicas(s, loads[s.name]) for s in sc.SERVICES}
        await hpa_twin.install(kube, ts, replicas)
    await _create(kube, sc.pytorchjob_obj(sc.TRAINING, sc.TRAINING.max_replicas))
    await _create(kube, sc.training_policy(sc.TRAINING, ts))
    job = sc.TRAINING
    say(
        f"pool {sc.POOL}: {sc.NODES} nodes x {sc.NODE_CPU} cpu, {sc.GPUS_PER_NODE} GPUs, "
        f"{sc.NICS_PER_NODE} RDMA NICs x {sc.VFS_PER_NIC} VFs; workloads: "
        + ", ".join(f"Deployment/{s.name} (priority {s.priority})" for s in services)
        + f", PyTorchJob/{job.name} (elastic {job.floor}..{job.max_replicas}, "
        f"{job.gpus} GPU + {job.rdma} RDMA VF per worker, SamePCIe); HPA twins "
        + ", ".join(f"Deployment/{t.name}" for t in hpa_twin.TWINS)
        + f" under autoscaling/v2 HPAs in pool {hpa_twin.POOL} ({hpa_twin.NODES} nodes)"
    )


def sample_period(ts: sc.TimeScale) -> float:
    """How often the workload simulator sends samples (and the view refreshes), wall seconds."""
    return min(0.5, ts.wall(sc.TRACE_SAMPLE_PERIOD))


def service_env(ts: sc.TimeScale, out: Path) -> dict[str, dict[str, str]]:
    actuator_cfg = out / "actuator.yaml"
    actuator_cfg.write_text(
        yaml.safe_dump(
            {
                "allowed_namespaces": [sc.NAMESPACE],
                "group_id": "demo-actuator",
                "policy_ttl_seconds": 1.0,
            }
        )
    )
    stable = ts.wall(sc.TRACE_STABLE_WINDOW)
    panic = ts.wall(sc.TRACE_PANIC_WINDOW)
    return {
        "aggregator": {
            "APP_ID": "demo-aggregator",
            "STABLE_WINDOW_SECONDS": f"{stable:g}",
            "STABLE_HOP_SECONDS": f"{round(stable / 4, 3):g}",
            "PANIC_WINDOW_SECONDS": f"{panic:g}",
            "PANIC_HOP_SECONDS": f"{round(panic / 2, 3):g}",
            "ALLOWED_LATENESS_SECONDS": f"{min(2.0, panic / 2):g}",
            "PUBLISH_INTERVAL_MS": "200",
            # the instants of a per-pod series: one per sample the workload simulator sends
            "INSTANT_SECONDS": f"{sample_period(ts):g}",
        },
        "decider": {
            "GROUP_ID": "demo-decider",
            "STEP_SECONDS": f"{ts.wall(sc.TRACE_DECISION_STEP):g}",
            "TICK_SECONDS": "0.5",
            "PENDING_GRACE_SECONDS": f"{max(5.0, ts.wall(sc.TRACE_PENDING_GRACE)):g}",
        },
        "actuator": {"CONFIG": str(actuator_cfg)},
        "cluster-collector": {"COALESCE_MS": "100"},
    }


# --- the run -----------------------------------------------------------------------------------


class Demo:
    def __init__(self, opts: Options, say: Say) -> None:
        self.opts = opts
        self.say = say
        self.ts = sc.TimeScale(opts.speed)
        self.out = opts.out
        self.stack = Stack(opts.out, say, hpa_sync_seconds=self.ts.wall(hpa_twin.TRACE_SYNC))
        trace = traces.load(traces.BUILTIN_PREFIX + opts.trace.removeprefix(traces.BUILTIN_PREFIX))
        self.trace = trace
        self.segments = sc.segments(trace, opts.duration * opts.speed)
        self.t0 = 0.0
        self.board = Board(duration=opts.duration)
        self.timeline: list[Sample] = []
        self.desired: dict[str, int] = {}
        self.metrics_reads = 0

    def trace_seconds(self, now: float) -> float:
        return max(0.0, (now - self.t0) * self.opts.speed) if self.t0 else 0.0

    def load(self, service: str, now: float) -> float:
        return self.segments[hpa_twin.service_of(service)].at(self.trace_seconds(now))

    async def _follow(self) -> None:
        consumer = Consumer(
            self.stack.bootstrap, [events.DECISIONS, events.ACTUATIONS], group_id=None,
            check_keys=False,
        )  # fmt: skip
        await consumer.start()
        try:
            while True:
                for m in await consumer.poll(300):
                    v = m.value
                    if isinstance(v, events.ScaleDecision):
                        self.board.on_decision(v)
                        self.desired[v.workload] = v.to_replicas
                    elif isinstance(v, events.Actuation):
                        self.board.on_actuation(v)
        finally:
            await consumer.stop()

    def _refresh(self, kubelet: Kubelet, now: float) -> None:
        b = self.board
        b.elapsed = now - self.t0 if self.t0 else 0.0
        b.trace_seconds = self.trace_seconds(now)
        b.gpus_used, b.gpus_total = kubelet.gpu_use()
        b.kubelet_errors = kubelet.errors
        snap = kubelet.snapshot()
        for s in hpa_twin.WEB:
            row = b.rows[s.workload]
            row.load = self.load(s.name, now)
            row.spec, row.ready = snap[s.name].spec, snap[s.name].ready
        job = b.rows[sc.TRAINING.workload]
        job.spec, job.ready = snap[sc.TRAINING.name].spec, snap[sc.TRAINING.name].ready
        if self.t0:
            for wl, row in b.rows.items():
                self.timeline.append(
                    Sample(
                        wall=now,
                        trace_seconds=b.trace_seconds,
                        workload=wl,
                        load=row.load if row.load is not None else sc.TRAIN_QUEUE,
                        spec=row.spec,
                        ready=row.ready,
                        desired=self.desired.get(wl, row.spec),
                        gpus_used=b.gpus_used,
                    )
                )

    async def main(self) -> None:
        opts, ts, say = self.opts, self.ts, self.say
        for text in ts.describe():
            say(text)
        for name, seg in self.segments.items():
            say(
                f"load {name}: {seg.trace} rows {seg.start}..{seg.start + seg.rows - 1} "
                f"({seg.rows} x {seg.step:g} s = {seg.rows * seg.step / 60:.0f} trace-min), "
                f"mapped to {seg.base:g}..{seg.peak:g} rps"
            )
        await asyncio.to_thread(self.stack.up_infra)
        await ensure_topics(self.stack.bootstrap)
        assert self.stack.kubeconfig is not None
        for s in sc.SERVICES:
            self.board.rows[s.workload] = Row(
                s.name, "Deployment", s.priority, None, f"{sc.TARGET_PER_POD:g} rps/pod"
            )
        for twin in hpa_twin.TWINS:
            self.board.rows[twin.workload] = Row(
                twin.name, "Deployment", twin.priority, None, f"HPA {sc.TARGET_PER_POD:g} rps/pod"
            )
        job = sc.TRAINING
        self.board.rows[job.workload] = Row(
            job.name, "PyTorchJob", 0, None, f"queue {sc.TRAIN_QUEUE:g}, floor {job.floor}"
        )
        async with await connect(self.stack.kubeconfig) as api:
            kube = Kube(api)
            loads = {s.name: self.segments[s.name].at(0) for s in sc.SERVICES}
            await install(kube, ts, loads, say)
            kubelet = Kubelet(
                kube,
                push_url="",  # the collector's, once it runs; nothing is pushed before go_live
                load=self.load,
                sample_period_s=sample_period(ts),
                web_startup_s=ts.wall(sc.TRACE_WEB_STARTUP),
                train_startup_s=ts.wall(sc.TRACE_TRAIN_STARTUP),
            )
            tasks = [asyncio.create_task(kubelet.run(), name="kubelet")]
            metrics = metrics_api.MetricsServer(kubelet.usage, self.out / "metrics-api-tls")
            try:
                # metrics.k8s.io first: a resource metric (none in the demo now) reads it at once
                await self._serve_metrics(kube, metrics)
                certs = await asyncio.to_thread(hpa_twin.adapter_certs, self.out / "adapter-tls")
                env, port = service_env(ts, self.out), free_port()
                env["metrics-adapter"] = hpa_twin.adapter_env(certs, port)
                await asyncio.to_thread(self.stack.start_services, env)
                say("services ready: " + ", ".join(p.name for p in self.stack.procs))
                ok = await hpa_twin.register_adapter(kube, certs[0], port)
                state = "Available" if ok else "NOT Available"
                say(f"external.metrics.k8s.io: APIService {hpa_twin.APISERVICE} -> "
                    f"governor-metrics-adapter :{port}, {state}")  # fmt: skip
                tasks.append(asyncio.create_task(self._poll_hpas(kube), name="hpas"))
                kubelet.push_url = f"http://127.0.0.1:{self.stack.collector_port}/v1/samples"
                tasks.append(asyncio.create_task(self._follow(), name="follow"))
                tasks.append(asyncio.create_task(self._poll_metrics(kube, metrics), name="metrics"))
                await self._warm_up(kubelet)
                self.t0 = time.time()
                kubelet.go_live()
                trace_min = opts.duration * opts.speed / 60
                say(f"replaying {opts.duration:g} s ({trace_min:.0f} trace-min)")
                await self._show(kubelet, tasks)
                await self._ab()
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                # the services first: the collector reads metrics.k8s.io until it stops
                await asyncio.shield(asyncio.to_thread(self.stack.stop_services))
                await metrics.stop()

    async def _serve_metrics(self, kube: Kube, metrics: metrics_api.MetricsServer) -> None:
        """metrics.k8s.io through the aggregation layer; the demo goes on without it."""
        try:
            ca, names = await front_proxy_trust(kube)
            await metrics.start(ca, names)
            await metrics_api.register(kube, metrics)
            ok = await metrics_api.wait_available(kube, 30.0)
        except (OSError, KubeError, subprocess.SubprocessError) as e:
            self.say(f"metrics.k8s.io: not served ({e})")
            self.board.metrics_api = f"metrics.k8s.io: not served ({e})"
            return
        state = "Available" if ok else "not Available after 30 s"
        self.say(f"metrics.k8s.io: APIService {metrics_api.APISERVICE} -> https://localhost:"
                 f"{metrics.port} (ExternalName Service), {state}")  # fmt: skip

    async def _poll_metrics(self, kube: Kube, metrics: metrics_api.MetricsServer) -> None:
        """Read PodMetrics back through the API server, as `kubectl top pods -n demo` would."""
        path = f"/apis/{metrics_api.GROUP_VERSION}/namespaces/{sc.NAMESPACE}/pods"
        while True:
            try:
                doc = await kube.request("GET", path)
                items = doc.get("items") or []
                cpu = sum(parse_quantity(c["usage"]["cpu"]) for i in items for c in i["containers"])
                self.board.metrics_api = (
                    f"metrics.k8s.io via the API server: {len(items)} PodMetrics, {cpu:.1f} cores "
                    f"in use; served {metrics.requests} requests (401: {metrics.rejected})"
                )
                self.metrics_reads += 1
            except (KubeError, KeyError, TypeError) as e:
                self.board.metrics_api = f"metrics.k8s.io via the API server: {e}"
            await asyncio.sleep(2.0)

    async def _ab(self) -> None:
        """`governor ab` on the run's traffic while Kafka still holds it: the Active policy of
        the first service against its Shadow (out/demo-stack/ab.txt and ab/ab.html)."""
        s = sc.SERVICES[0]
        command = ["governor", "ab", s.workload, "--since", f"{self.opts.duration + 60:.0f}s",
                   "--capacity-per-replica", f"{sc.CAPACITY_PER_REPLICA:g}",
                   "--bootstrap", self.stack.bootstrap, "--out", str(self.out / "ab")]  # fmt: skip
        self.say("$ " + " ".join(command))
        done = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, timeout=300, check=False
        )
        text = done.stdout + done.stderr
        (self.out / "ab.txt").write_text("$ " + " ".join(command) + "\n" + text)
        for row in text.rstrip().splitlines():
            self.say(row)

    async def _poll_hpas(self, kube: Kube) -> None:
        """The twins' HPAs as the controller left them: desired replicas and the metric read."""
        while True:
            for t in hpa_twin.TWINS:
                row = self.board.rows[t.workload]
                try:
                    hpa = await kube.get("autoscaling/v2", "horizontalpodautoscalers", t.name,
                                         namespace=sc.NAMESPACE)  # fmt: skip
                except KubeError as e:
                    row.reason = f"HPA: {e}"
                    continue
                status = hpa.get("status") or {}
                row.desired = status.get("desiredReplicas")
                if row.desired is not None:
                    self.desired[t.workload] = int(row.desired)
                current = (status.get("currentMetrics") or [{}])[0].get("external") or {}
                value = (current.get("current") or {}).get("averageValue", "-")
                row.reason = f"HPA: {sc.METRIC} per replica {value} (external, delayed)"
            await asyncio.sleep(1.0)

    async def _warm_up(self, kubelet: Kubelet) -> None:
        deadline = time.monotonic() + 60
        while True:
            snap = kubelet.snapshot()
            if all(s.spec > 0 and s.ready == s.spec for s in snap.values()):
                return
            if time.monotonic() > deadline:
                raise StackError(f"initial pods not ready in 60 s: {snap}")
            await asyncio.sleep(0.2)

    async def _show(self, kubelet: Kubelet, tasks: list[asyncio.Task[None]]) -> None:
        end = self.t0 + self.opts.duration
        period = sample_period(self.ts)
        last_line = 0.0

        def alive() -> None:
            self.stack.check_alive()
            for t in tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    raise StackError(f"{t.get_name()} failed: {t.exception()!r}")

        if self.opts.headless:
            while (now := time.time()) < end:
                self._refresh(kubelet, now)
                if now - last_line >= 5.0:
                    print(line(self.board), flush=True)
                    last_line = now
                alive()
                await asyncio.sleep(period)
            return
        from rich.live import Live

        with Live(table(self.board), refresh_per_second=4, screen=False) as live:
            while (now := time.time()) < end:
                self._refresh(kubelet, now)
                live.update(table(self.board))
                alive()
                await asyncio.sleep(period)

    def write_timeline(self) -> Path:
        path = self.out / "timeline.csv"
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(TIMELINE_HEADER)
            for s in self.timeline:
                w.writerow(msgspec.to_builtins(s))
        return path


def run(opts: Options, say: Say | None = None) -> int:
    """The whole demo; returns the exit code. Ctrl-C stops everything and still reports."""
    say = say or (lambda text: print(text, flush=True))
    started = time.monotonic()
    missing = missing_prerequisites()
    if missing:
        print("governor demo: missing: " + "; ".join(missing), file=sys.stderr)
        return MISSING_PREREQUISITES
    opts.out.mkdir(parents=True, exist_ok=True)
    try:
        demo = Demo(opts, say)
    except (ValueError, traces.TraceError) as e:
        print(f"governor demo: {e}", file=sys.stderr)
        return 2
    try:
        with exclusive():
            code = _run_stack(demo, say)
    except Busy as e:
        print(f"governor demo: {e}", file=sys.stderr)
        return 1
    if code == 0 and demo.board.decisions == 0:
        logs = ", ".join(f"{n}.log" for n in ("aggregator", "decider", "collector"))
        print(
            f"governor demo: the pipeline made no decision in {opts.duration:g} s: "
            f"see {opts.out}/{{{logs}}}",
            file=sys.stderr,
        )
        code = 1
    if demo.timeline:
        demo.write_timeline()
        with contextlib.suppress(KeyboardInterrupt):
            from governor_tools.demo import report

            paths, verdict = report.write(demo, opts.out)
            for path in paths:
                say(f"report: {path.resolve()}")
            for line in verdict:
                say(line)
    timings = ", ".join(f"{k} {v:.1f}s" for k, v in demo.stack.timings.items())
    say(f"wall time {time.monotonic() - started:.0f} s ({timings})")
    return code


def _run_stack(demo: Demo, say: Say) -> int:
    """Kafka, the control plane, services and the replay; everything stopped at the end."""
    code = 0
    try:
        asyncio.run(demo.main())
    except KeyboardInterrupt:
        say("interrupted: stopping everything")
        code = 130
    except (StackError, KubeError, OSError) as e:
        print(f"governor demo: {e}", file=sys.stderr)
        code = 1
    finally:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            say("stopping services, control plane and Kafka")
            demo.stack.stop()
        except StackError as e:
            print(f"governor demo: while stopping: {e}", file=sys.stderr)
            code = code or 1
        finally:
            signal.signal(signal.SIGINT, previous)
    return code
