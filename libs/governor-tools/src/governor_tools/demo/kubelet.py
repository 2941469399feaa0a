"""The workload simulator: stands in for the scheduler, the controllers and the kubelets (as KWOK
does), against the real API server.

- watches the demo's targets (Deployments, the PyTorchJob) and their Pods;
- for each target, creates Pods bound to a node (spec.nodeName, first fit on cpu and GPUs over the
  pool's nodes) up to its spec replicas and deletes the newest (unready first) above it; deletions
  go first so a shrinking job frees room for a growing service in the same pass; a replica that
  fits nowhere is not created (a real scheduler would leave it Pending) and is retried;
- marks a Pod Ready after its start-up delay (a status patch: phase Running, condition Ready);
- writes the targets' status: Deployment replicas/readyReplicas/observedGeneration, PyTorchJob
  replicaStatuses.Worker.{active, selector}, startTime and a Running condition;
- emits per-pod samples to the collector's push endpoint: each ready pod of a service reports
  `rps` = offered load / ready replicas; the training job reports its queue of work.
- runs the HPA twins' pods (governor_tools.demo.hpa_twin) the same way, on their own pool's nodes.

What it does not do: Koordinator's device-allocated annotations are not written (the collector
would count managed pods' devices as used, see governor.policy.allocate's contract); a resize does
not restart the job's other workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp

from governor.kube import Kube, KubeError, resource_path
from governor_tools.demo import hpa_twin
from governor_tools.demo import scenario as sc
from governor_tools.demo.kwatch import Watch
from governor_tools.demo.metrics_api import PodUsage

log = logging.getLogger("governor.demo.kubelet")

LoadFn = Callable[[str, float], float]  # (service name, wall time) -> offered load


@dataclass
class Target:
    name: str
    kind: str  # Deployment | PyTorchJob
    api_version: str
    plural: str
    labels: dict[str, str]
    cpu: float
    gpus: int
    startup_s: float
    nodes: list[str] = field(default_factory=sc.node_names)  # the pool its pods go to
    spec_replicas: int = 0
    generation: int = 0
    last_status: dict[str, Any] | None = None

    @property
    def workload(self) -> str:
        return f"{sc.NAMESPACE}/{self.kind}/{self.name}"


@dataclass
class PodRec:
    name: str
    target: str
    node: str
    cpu: float
    gpus: int
    created: float
    ready: bool = False


@dataclass
class Snapshot:
    spec: int
    live: int
    ready: int


@dataclass
class Kubelet:
    kube: Kube
    push_url: str
    load: LoadFn
    sample_period_s: float
    web_startup_s: float
    train_startup_s: float
    started_at: float = field(default_factory=time.time)
    services: tuple[sc.WebService, ...] = hpa_twin.WEB  # the demo's services and their twins
    # More collectors' push endpoints: a push that fails goes to the next one (redundant
    # collectors, as a load balancer in front of them would do).
    push_fallbacks: tuple[str, ...] = ()
    muted: bool = False  # no samples while set (a metric source outage)
    targets: dict[str, Target] = field(default_factory=dict)
    pods: dict[str, PodRec] = field(default_factory=dict)
    warm: bool = True  # until `go_live`: new pods are ready at once (the initial replicas)
    samples_sent: int = 0
    errors: int = 0
    _seq: int = 0
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        for s in self.services:  # the HPA twins (in a pool of their own) among them
            self.targets[s.name] = Target(
                s.name, "Deployment", "apps/v1", "deployments", {"app": s.name}, s.cpu, 0,
                self.web_startup_s,
                hpa_twin.node_names() if s in hpa_twin.TWINS else sc.node_names(),
            )  # fmt: skip
        job = sc.TRAINING
        self.targets[job.name] = Target(
            job.name, "PyTorchJob", "kubeflow.org/v1", "pytorchjobs", sc.training_labels(job),
            job.cpu, job.gpus, self.train_startup_s,
        )  # fmt: skip

    # --- views --------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Snapshot]:
        out: dict[str, Snapshot] = {}
        for name, t in self.targets.items():
            mine = [p for p in self.pods.values() if p.target == name]
            out[name] = Snapshot(t.spec_replicas, len(mine), sum(p.ready for p in mine))
        return out

    def gpu_use(self) -> tuple[int, int]:
        return sum(p.gpus for p in self.pods.values()), sc.NODES * sc.GPUS_PER_NODE

    def usage(self) -> list[PodUsage]:
        """What metrics-server would report for the ready pods (see governor.demo.metrics_api)."""
        now = time.time()
        ready: dict[str, int] = {}
        for p in self.pods.values():
            if p.ready:
                ready[p.target] = ready.get(p.target, 0) + 1
        out: list[PodUsage] = []
        for p in list(self.pods.values()):
            if not p.ready or not p.name:
                continue
            t = self.targets[p.target]
            if t.kind == "Deployment":
                per_pod = self.load(t.name, now) / max(1, ready[p.target])
                share = min(1.0, per_pod / sc.CAPACITY_PER_REPLICA)
                cpu, mem, container = share * t.cpu, (0.5 + share) * 2**30, "web"
            else:
                cpu, mem, container = 0.9 * t.cpu, 24.0 * 2**30, "pytorch"
            out.append((p.name, sc.NAMESPACE, dict(t.labels), p.node, container, cpu, mem))
        return out

    def go_live(self) -> None:
        self.warm = False

    # --- watches ------------------------------------------------------------------------------

    def _on_target(self, name: str, obj: dict[str, Any] | None) -> None:
        t = self.targets.get(name.rpartition("/")[2])
        if t is None or obj is None:
            return
        spec = obj.get("spec") or {}
        if t.kind == "Deployment":
            replicas = spec.get("replicas", 1)
        else:
            replicas = ((spec.get("pytorchReplicaSpecs") or {}).get("Worker") or {}).get(
                "replicas", 0
            )
        t.spec_replicas = int(replicas)
        t.generation = int((obj.get("metadata") or {}).get("generation", 0))
        self._wake.set()

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(
                Watch(
                    self.kube, "apps/v1", "deployments", namespace=sc.NAMESPACE,
                    on_change=self._on_target,
                ).run()
            ),
            asyncio.create_task(
                Watch(
                    self.kube, "kubeflow.org/v1", "pytorchjobs", namespace=sc.NAMESPACE,
                    on_change=self._on_target,
                ).run()
            ),
            asyncio.create_task(self._samples()),
        ]  # fmt: skip
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 0.1)
                self._wake.clear()
                try:
                    await self.reconcile(time.time())
                except KubeError as e:
                    self.errors += 1
                    log.info("reconcile: %s", e)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- pods ---------------------------------------------------------------------------------

    def _fit(self, t: Target) -> str | None:
        for node in t.nodes:
            on = [p for p in self.pods.values() if p.node == node]
            cpu = sum(p.cpu for p in on)
            gpus = sum(p.gpus for p in on)
            if cpu + t.cpu <= sc.NODE_CPU and gpus + t.gpus <= sc.GPUS_PER_NODE:
                return node
        return None

    def _pod_obj(self, t: Target, name: str, node: str, template: dict[str, Any]) -> dict[str, Any]:
        meta = template.get("metadata") or {}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": sc.NAMESPACE,
                "labels": dict(meta.get("labels") or t.labels),
                "annotations": dict(meta.get("annotations") or {}),
            },
            "spec": {**(template.get("spec") or {}), "nodeName": node},
        }

    def _template(self, t: Target) -> dict[str, Any]:
        if t.kind == "Deployment":
            s = next(s for s in self.services if s.name == t.name)
            tpl: dict[str, Any] = sc.deployment_obj(s, 0)["spec"]["template"]
            return tpl
        job_tpl: dict[str, Any] = sc.pytorchjob_obj(sc.TRAINING, 0)["spec"]["pytorchReplicaSpecs"][
            "Worker"
        ]["template"]
        return job_tpl

    async def _delete(self, p: PodRec) -> None:
        self.pods.pop(p.name, None)
        path = resource_path("v1", "pods", p.name, namespace=sc.NAMESPACE)
        try:
            await self.kube.request("DELETE", path, query=[("gracePeriodSeconds", "0")])
        except KubeError as e:
            if not e.not_found:
                raise

    async def _create(self, t: Target, node: str) -> None:
        self._seq += 1
        name = f"{t.name}-{self._seq:05d}"
        now = time.time()
        rec = PodRec(name, t.name, node, t.cpu, t.gpus, now)
        self.pods[name] = rec
        body = self._pod_obj(t, name, node, self._template(t))
        try:
            await self.kube.create("v1", "pods", body, namespace=sc.NAMESPACE)
        except KubeError:
            self.pods.pop(name, None)
            raise
        if self.warm:
            await self._mark_ready(rec)

    async def _mark_ready(self, p: PodRec) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "status": {
                "phase": "Running",
                "hostIP": "10.0.0.1",
                "podIP": "10.1.0.1",
                "startTime": stamp,
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": stamp},
                    {"type": "Ready", "status": "True", "lastTransitionTime": stamp},
                ],
            }
        }
        await self.kube.merge_patch(
            "v1", "pods", p.name, status, namespace=sc.NAMESPACE, subresource="status"
        )
        p.ready = True

    async def reconcile(self, now: float) -> None:
        deletes: list[PodRec] = []
        creates: list[Target] = []
        for t in self.targets.values():
            mine = sorted(
                (p for p in self.pods.values() if p.target == t.name),
                key=lambda p: (p.ready, -p.created),
            )
            extra = len(mine) - t.spec_replicas
            if extra > 0:
                deletes += mine[:extra]
            elif extra < 0:
                creates += [t] * (-extra)
        await asyncio.gather(*(self._delete(p) for p in deletes))
        jobs: list[tuple[Target, str]] = []
        for t in creates:
            node = self._fit(t)
            if node is None:
                continue
            # reserve the room now so the next replica sees it taken
            self.pods[f"reserving-{len(jobs)}"] = PodRec("", t.name, node, t.cpu, t.gpus, now)
            jobs.append((t, node))
        for i in range(len(jobs)):
            self.pods.pop(f"reserving-{i}", None)
        await asyncio.gather(*(self._create(t, node) for t, node in jobs))
        due = [
            p
            for p in self.pods.values()
            if not p.ready and now - p.created >= self.targets[p.target].startup_s
        ]
        await asyncio.gather(*(self._mark_ready(p) for p in due))
        for t in self.targets.values():
            await self._write_status(t)

    async def _write_status(self, t: Target) -> None:
        mine = [p for p in self.pods.values() if p.target == t.name]
        live, ready = len(mine), sum(p.ready for p in mine)
        status: dict[str, Any]
        if t.kind == "Deployment":
            status = {
                "observedGeneration": t.generation,
                "replicas": live,
                "updatedReplicas": live,
                "readyReplicas": ready,
                "availableReplicas": ready,
            }
        else:
            selector = ",".join(f"{k}={v}" for k, v in sorted(t.labels.items()))
            started = datetime.fromtimestamp(self.started_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            status = {
                "replicaStatuses": {"Worker": {"active": ready, "selector": selector}},
                "startTime": started,
                "conditions": [{"type": "Running", "status": "True", "reason": "Running"}],
            }
        if status == t.last_status:
            return
        await self.kube.merge_patch(
            t.api_version,
            t.plural,
            t.name,
            {"status": status},
            namespace=sc.NAMESPACE,
            subresource="status",
        )
        t.last_status = status

    # --- samples ------------------------------------------------------------------------------

    def samples(self, now: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for s in self.services:
            ready = [p for p in self.pods.values() if p.target == s.name and p.ready]
            if not ready:
                continue
            per_pod = self.load(s.name, now) / len(ready)
            out += [
                {
                    "workload": s.workload,
                    "metric": sc.METRIC,
                    "value": per_pod,
                    "timestamp": now,
                    "source": "demo-kubelet",
                    "labels": {"pod": p.name},
                }
                for p in ready
            ]
        out.append(
            {
                "workload": sc.TRAINING.workload,
                "metric": sc.TRAIN_METRIC,
                "value": sc.TRAIN_QUEUE,
                "timestamp": now,
                "source": "demo-kubelet",
            }
        )
        return out

    async def _samples(self) -> None:
        async with aiohttp.ClientSession() as http:
            next_at = time.time()
            while True:
                next_at += self.sample_period_s
                await asyncio.sleep(max(0.0, next_at - time.time()))
                if self.warm or self.muted:
                    continue
                body = {"samples": self.samples(time.time())}
                for url in (self.push_url, *self.push_fallbacks):
                    if await self._push(http, url, body):
                        self.samples_sent += len(body["samples"])
                        break

    async def _push(self, http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> bool:
        try:
            async with http.post(url, json=body) as resp:
                if resp.status == 200:
                    return True
                log.info("push: %s %s", resp.status, await resp.text())
        except (aiohttp.ClientError, OSError) as e:
            log.info("push: %s", e)
        self.errors += 1
        return False
