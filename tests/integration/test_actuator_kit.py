"""Shared pieces of the actuator's integration tests (no tests here): the CRDs and the kustomize
base on the real API server, the actuator as a real process under its own ServiceAccount, unique
Kafka topics, and a reader of the actuations topic.

`render_kustomization(dir)` is a small kustomize renderer for the features deploy/k8s uses --
`resources` (files and kustomization directories, recursively), `namespace` (set on namespaced
objects; RoleBinding subjects untouched, as kustomize does), `labels` (metadata only),
`configMapGenerator` with `files` and `generatorOptions.disableNameSuffixHash: true` -- so the
base can be applied where `kubectl kustomize` is missing. Where kubectl exists the tests check
that both render the same objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
import pytest_asyncio
import yaml
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from governor import bus
from governor.events import ACTUATIONS, DECISIONS, Actuation, Reason, ScaleDecision
from governor.kube import Kube, KubeError
from tests.fixtures.kube import governor_kube
from tests.support import waiting
from tests.support.policies import average_metric, scaling_policy_obj
from tests.support.procs import free_port

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
BASE = K8S / "base"
CRD_FILES = [
    K8S / "crds" / "scalingpolicy.yaml",
    K8S / "crds" / "testing" / "volcano-job.yaml",
    K8S / "crds" / "testing" / "pytorchjob.yaml",
    K8S / "crds" / "testing" / "keda-scaledobject.yaml",
]
SYSTEM_NS = "governor-system"
ACTUATOR_SA = "governor-actuator"
FIELD_MANAGER = "governor-tests"
CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "StorageClass",
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --- kustomize, the small way -----------------------------------------------------------------


def render_kustomization(path: Path) -> list[dict[str, Any]]:
    """Render a kustomization directory (the subset described in the module docstring)."""
    kfile = path / "kustomization.yaml"
    spec = yaml.safe_load(kfile.read_text()) or {}
    objs: list[dict[str, Any]] = []
    for res in spec.get("resources") or []:
        target = (path / res).resolve()
        if target.is_dir():
            objs += render_kustomization(target)
        else:
            objs += [d for d in yaml.safe_load_all(target.read_text()) if d]
    options = spec.get("generatorOptions") or {}
    for gen in spec.get("configMapGenerator") or []:
        if not options.get("disableNameSuffixHash"):
            raise ValueError(f"{kfile}: the small renderer needs disableNameSuffixHash: true")
        data = {Path(f).name: (path / f).read_text() for f in gen.get("files") or []}
        meta: dict[str, Any] = {"name": gen["name"]}
        if gen.get("namespace"):
            meta["namespace"] = gen["namespace"]
        objs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    ns = spec.get("namespace")
    for obj in objs:
        meta = obj.setdefault("metadata", {})
        if ns and obj.get("kind") not in CLUSTER_SCOPED:
            meta["namespace"] = ns
        for label in spec.get("labels") or []:
            meta.setdefault("labels", {}).update(label.get("pairs") or {})
    return objs


def kubectl_kustomize(path: Path) -> list[dict[str, Any]] | None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    out = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def render_base() -> list[dict[str, Any]]:
    """The base as kubectl kustomize renders it, else as the small renderer does."""
    return kubectl_kustomize(BASE) or render_kustomization(BASE)


def ident(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


# --- the API server -----------------------------------------------------------------------------


async def apply_all(kube: Kube, objs: Iterable[dict[str, Any]], *, dry_run: bool = False) -> None:
    for obj in objs:
        await kube.apply(obj, field_manager=FIELD_MANAGER, dry_run=dry_run)


async def wait_established(kube: Kube, name: str, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while True:
        crd = await kube.get("apiextensions.k8s.io/v1", "customresourcedefinitions", name)
        conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
        if conds.get("Established") == "True":
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {name} not established: {conds}")
        await asyncio.sleep(0.2)


async def install_crds(kube: Kube) -> None:
    docs = [d for f in CRD_FILES for d in yaml.safe_load_all(f.read_text()) if d]
    await apply_all(kube, docs)
    for d in docs:
        await wait_established(kube, d["metadata"]["name"])
    # discovery of the new groups can lag the Established condition a little
    kube.forget_discovery()
    for api_version, kind in [
        ("governor.dev/v1alpha1", "ScalingPolicy"),
        ("batch.volcano.sh/v1alpha1", "Job"),
        ("kubeflow.org/v1", "PyTorchJob"),
        ("keda.sh/v1alpha1", "ScaledObject"),
    ]:
        await eventually(lambda a=api_version, k=kind: kube.resource(a, k), within_s=30)


async def eventually(fn: Any, within_s: float = 20.0, interval: float = 0.2) -> Any:
    """Call async `fn` until it returns without raising (AssertionError or KubeError)."""
    return await waiting.eventually(fn, within_s, (AssertionError, KubeError), interval)


async def create_namespace(kube: Kube, name: str) -> None:
    with contextlib.suppress(KubeError):
        await kube.create("v1", "namespaces", {"metadata": {"name": name}})


async def install_base_rbac(kube: Kube, allowed: Iterable[str]) -> list[dict[str, Any]]:
    """The base's ServiceAccounts and RBAC as rendered, with the actuator's RoleBinding in each
    `allowed` namespace (what allowed-namespaces/<ns> does). Returns the applied objects."""
    objs = render_base()
    await create_namespace(kube, SYSTEM_NS)
    wanted = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    chosen = [o for o in objs if o["kind"] in wanted]
    # and the Roles of governor's own namespace (the cluster collectors' leader Lease)
    chosen += [
        o
        for o in objs
        if o["kind"] in ("Role", "RoleBinding") and o["metadata"].get("namespace") == SYSTEM_NS
    ]
    access = render_kustomization(BASE / "target-access")
    for ns in allowed:
        for rb in access:
            rb = {**rb, "metadata": {**rb["metadata"], "namespace": ns}}
            chosen.append(rb)
    await apply_all(kube, chosen)
    # the RBAC authorizer sees new bindings through an informer: wait until they are in effect
    for ns in allowed:
        await eventually(lambda n=ns: _assert_allowed(kube, n), within_s=20, interval=0.1)
    return chosen


async def _assert_allowed(kube: Kube, namespace: str) -> None:
    review = await kube.create(
        "authorization.k8s.io/v1",
        "subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{SYSTEM_NS}:{ACTUATOR_SA}",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "resourceAttributes": {
                    "verb": "patch",
                    "resource": "deployments",
                    "group": "apps",
                    "namespace": namespace,
                },
            },
        },
    )
    assert review["status"].get("allowed"), review["status"]


async def service_account_token(kube: Kube, namespace: str, name: str) -> str:
    """A token of the ServiceAccount, valid for an hour (a TokenRequest)."""
    tr = await kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [], "expirationSeconds": 3600},
        },
    )
    return str(tr["status"]["token"])


async def service_account_kubeconfig(
    kube: Kube,
    admin_kubeconfig: Path,
    out: Path,
    namespace: str = SYSTEM_NS,
    name: str = ACTUATOR_SA,
) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount (a TokenRequest token)."""
    token = await service_account_token(kube, namespace, name)
    admin = yaml.safe_load(admin_kubeconfig.read_text())  # noqa: ASYNC240
    cluster = dict(admin["clusters"][0]["cluster"])
    ca = cluster.get("certificate-authority")
    if ca and not Path(ca).is_absolute():
        cluster["certificate-authority"] = str((admin_kubeconfig.parent / ca).resolve())
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "test", "user": name}}],
        "current-context": "sa",
    }
    out.write_text(yaml.safe_dump(doc))  # noqa: ASYNC240
    return out


# --- Kafka --------------------------------------------------------------------------------------


async def create_topics(bootstrap: str, names: Iterable[str], partitions: int = 3) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names]
        )
    finally:
        await admin.close()


class ActuationLog:
    """Reads an actuations topic from the beginning in the background, by decision id."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.records: list[Actuation] = []
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._decoder = msgspec.json.Decoder(Actuation)

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        self._task = asyncio.create_task(self._run(consumer))

    async def _run(self, consumer: AIOKafkaConsumer) -> None:
        try:
            while True:
                batches = await consumer.getmany(timeout_ms=200)
                fresh = [self._decoder.decode(r.value) for rs in batches.values() for r in rs]
                if fresh:
                    async with self._changed:
                        self.records += fresh
                        self._changed.notify_all()
        finally:
            await consumer.stop()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def of(self, decision_id: str) -> list[Actuation]:
        return [r for r in self.records if r.decision_id == decision_id]

    async def wait(self, decision_id: str, count: int = 1, within_s: float = 30.0) -> Actuation:
        """The `count`-th actuation of a decision (the newest when more arrived)."""

        def ready() -> bool:
            return len(self.of(decision_id)) >= count

        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(ready), within_s)
            except TimeoutError:
                raise AssertionError(
                    f"no actuation #{count} for {decision_id} within {within_s}s "
                    f"(have {self.of(decision_id)})"
                ) from None
        return self.of(decision_id)[count - 1]


class DecisionSender:
    def __init__(self, producer: bus.Producer, topic: str) -> None:
        self.producer = producer
        self.topic = dataclasses.replace(DECISIONS, name=topic)

    async def send(self, d: ScaleDecision) -> ScaleDecision:
        await self.producer.send(self.topic, d)
        return d


def decision(
    workload: str,
    seq: int,
    to: int,
    *,
    policy: str = "",
    frm: int = 0,
    decision_id: str | None = None,
    reasons: list[Reason] | None = None,
    min_available: int | None = None,
) -> ScaleDecision:
    now = time.time()
    return ScaleDecision(
        decision_id=decision_id or unique(f"d{seq}"),
        workload=workload,
        seq=seq,
        from_replicas=frm,
        to_replicas=to,
        reasons=reasons
        or [Reason("metric", f"rps over target, want {to}", metric="rps", value=float(to) * 10)],
        inputs=[],
        policy_generation=1,
        newest_input=now,
        decided_at=now,
        policy=policy,
        min_available=min_available,
    )


# --- the actuator as a process ------------------------------------------------------------------


@dataclasses.dataclass
class ActuatorProcess:
    config: dict[str, Any]
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0
    log_path: Path | None = None

    def start(self) -> None:
        self.port = free_port()
        cfg = {**self.config, "http": {"host": "127.0.0.1", "port": self.port}}
        path = self.workdir / f"actuator-{self.port}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        self.log_path = self.workdir / f"actuator-{self.port}.log"
        exe = Path(sys.executable).parent / "governor-actuator"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GOVERNOR_ACTUATOR_")}
        env.pop("KUBECONFIG", None)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(exe), "--config", str(path)], stdout=log, stderr=subprocess.STDOUT, env=env
            )

    async def wait_ready(self, within_s: float = 60) -> None:
        deadline = time.monotonic() + within_s
        async with aiohttp.ClientSession() as http:
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise AssertionError(f"actuator exited {self.proc.returncode}:\n{self.logs()}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{self.port}/readyz") as r:
                        if r.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise AssertionError(f"actuator not ready in {within_s}s:\n{self.logs()}")
                await asyncio.sleep(0.2)

    async def metrics(self) -> str:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{self.port}/metrics") as r,
        ):
            return await r.text()

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"actuator ignored SIGTERM for {timeout}s") from None
        return int(self.proc.returncode)

    def logs(self) -> str:
        return self.log_path.read_text()[-5000:] if self.log_path else ""


# --- fixtures -------------------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module")
async def admin(kubeconfig_path: Path) -> AsyncIterator[Kube]:
    async with governor_kube(kubeconfig_path) as kube:
        await install_crds(kube)
        yield kube


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("actuator")


# --- objects ------------------------------------------------------------------------------------


def deployment(ns: str, name: str, replicas: int = 2, **annotations: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    }


def scaling_policy(
    ns: str, name: str, target_ref: dict[str, Any], *, min_replicas: int = 1, max_replicas: int = 8
) -> dict[str, Any]:
    return scaling_policy_obj(
        ns,
        name,
        targetRef=target_ref,
        minReplicas=min_replicas,
        maxReplicas=max_replicas,
        metrics=[average_metric(source={"type": "push"})],
    )


def volcano_job(ns: str, name: str) -> dict[str, Any]:
    pod = {"spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "minAvailable": 3,
            "schedulerName": "volcano",
            "queue": "default",
            "tasks": [
                {"name": "ps", "replicas": 1, "minAvailable": 1, "template": pod},
                {"name": "worker", "replicas": 2, "minAvailable": 1, "template": pod},
            ],
        },
    }


def pytorch_job(ns: str, name: str, workers: int = 2) -> dict[str, Any]:
    pod = {"spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:2.5"}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": 8, "rdzvBackend": "c10d"},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": pod},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": pod},
            },
        },
    }


def hpa(ns: str, name: str, target: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": 1,
            "maxReplicas": 5,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 80},
                    },
                }
            ],
        },
    }


def scaled_object(ns: str, name: str, target: str) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "scaleTargetRef": {"name": target},
            "triggers": [{"type": "kafka", "metadata": {"topic": "orders", "lagThreshold": "10"}}],
        },
    }


async def events_for(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    items = await kube.list_objects("v1", "events", namespace=ns)
    return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]


__all__ = [
    "ACTUATIONS",
    "ActuationLog",
    "ActuatorProcess",
    "DecisionSender",
    "admin",
    "workdir",
]
