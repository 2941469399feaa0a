"""The actuator end to end: real Kafka, the real API server, `governor-actuator` as a process
running as its ServiceAccount from the kustomize base (so its RBAC is exercised, not assumed).

Decisions produced to a (per-run) decisions topic move a Deployment, a Volcano Job and a
PyTorchJob within their ScalingPolicy bounds; annotations, Events and the policy status carry the
reasons. Every refusal changes nothing and is recorded on the actuations topic.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from governor import bus
from governor.events import Actuation, ScaleDecision
from governor.kube import Kube, KubeError
from governor.policy.actuation import ANN_DIGEST, ANN_ID, ANN_PAUSED, ANN_REASON, ANN_SEQ
from governor.spec import policy_from_obj
from governor_actuator.actuator import Actuator
from governor_actuator.config import ActuatorSettings
from tests.integration.test_actuator_kit import (
    ActuationLog,
    ActuatorProcess,
    DecisionSender,
    admin,  # noqa: F401 - fixture
    create_namespace,
    create_topics,
    decision,
    deployment,
    events_for,
    eventually,
    hpa,
    install_base_rbac,
    pytorch_job,
    scaled_object,
    scaling_policy,
    service_account_kubeconfig,
    unique,
    volcano_job,
    workdir,  # noqa: F401 - fixture
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Stack:
    kube: Kube
    ns: str
    denied_ns: str
    sender: DecisionSender
    actuations: ActuationLog
    process: ActuatorProcess
    config: dict[str, Any]
    sent: list[ScaleDecision] = field(default_factory=list)

    async def send(self, d: ScaleDecision) -> ScaleDecision:
        self.sent.append(d)
        return await self.sender.send(d)

    async def outcome(self, d: ScaleDecision, count: int = 1) -> Actuation:
        return await self.actuations.wait(d.decision_id, count=count, within_s=60)


@pytest_asyncio.fixture(scope="module")
async def stack(
    admin: Kube,  # noqa: F811
    kafka_bootstrap: str,
    kubeconfig_path: Path,
    workdir: Path,  # noqa: F811
) -> AsyncIterator[Stack]:
    ns, denied = unique("act"), unique("act-denied")
    for n in (ns, denied):
        await create_namespace(admin, n)
    await install_base_rbac(admin, [ns])
    sa_kubeconfig = await service_account_kubeconfig(
        admin, kubeconfig_path, workdir / "actuator-sa.kubeconfig"
    )
    decisions_topic = f"test.actuator.decisions.{unique('t')}"
    actuations_topic = f"test.actuator.actuations.{unique('t')}"
    await create_topics(
        kafka_bootstrap, [decisions_topic, actuations_topic, f"{decisions_topic}.dlq"]
    )
    config = {
        "kafka": {"bootstrap": kafka_bootstrap},
        "group_id": unique("actuator"),
        "decisions_topic": decisions_topic,
        "actuations_topic": actuations_topic,
        "kubeconfig": str(sa_kubeconfig),
        "allowed_namespaces": [ns],
        "policy_ttl_seconds": 0.5,
        "owner_ttl_seconds": 0.2,
        "log_level": "INFO",
    }
    process = ActuatorProcess(config, workdir)
    process.start()
    log = ActuationLog(kafka_bootstrap, actuations_topic)
    await log.start()
    producer = bus.Producer(kafka_bootstrap, client_id="actuator-e2e")
    await producer.start()
    try:
        await process.wait_ready()
        yield Stack(
            admin, ns, denied, DecisionSender(producer, decisions_topic), log, process, config
        )
    finally:
        await producer.stop()
        await log.stop()
        if process.proc is not None and process.proc.poll() is None:
            process.stop()


async def get(kube: Kube, api_version: str, plural: str, ns: str, name: str) -> dict[str, Any]:
    return await kube.get(api_version, plural, name, namespace=ns)


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


async def policy_status(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    obj = await kube.get("governor.dev/v1alpha1", "scalingpolicies", name, namespace=ns)
    return dict(obj.get("status") or {})


def condition(status: dict[str, Any]) -> dict[str, Any]:
    (c,) = [c for c in status.get("conditions", []) if c["type"] == "Actuated"]
    return dict(c)


# --- a Deployment: applied, then every kind of refusal ------------------------------------------


async def test_deployment_moves_within_bounds_and_refusals_change_nothing(stack: Stack) -> None:
    kube, ns = stack.kube, stack.ns
    await kube.apply(deployment(ns, "web", 2), field_manager="tests")
    await kube.apply(
        scaling_policy(ns, "web", {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}),
        field_manager="tests",
    )
    wl, pol = f"{ns}/Deployment/web", f"{ns}/web"

    d1 = await stack.send(decision(wl, 1, 4, policy=pol, frm=2))
    a1 = await stack.outcome(d1)
    assert (a1.outcome, a1.from_replicas, a1.to_replicas) == ("applied", 2, 4), a1
    obj = await get(kube, "apps/v1", "deployments", ns, "web")
    assert obj["spec"]["replicas"] == 4
    ann = annotations(obj)
    assert ann[ANN_SEQ] == "1" and ann[ANN_ID] == d1.decision_id
    assert ann[ANN_REASON] == "metric(rps=40): rps over target, want 4"
    assert len(ann[ANN_DIGEST]) == 16
    assert a1.resource_version == obj["metadata"]["resourceVersion"]

    d2 = await stack.send(decision(wl, 2, 6, policy=pol, frm=4))
    assert (await stack.outcome(d2)).outcome == "applied"

    async def status_says_6() -> dict[str, Any]:
        s = await policy_status(kube, ns, "web")
        assert s.get("lastDecisionId") == d2.decision_id, s
        return s

    status = await eventually(status_says_6)
    assert status["currentReplicas"] == 6 and status["desiredReplicas"] == 6
    assert status["lastDecisionSeq"] == 2
    assert status["lastReason"] == "metric(rps=60): rps over target, want 6"
    assert condition(status)["status"] == "True"

    async def scaled_events() -> list[dict[str, Any]]:
        evs = [e for e in await events_for(kube, ns, "web") if e["reason"] == "GovernorScaled"]
        assert len(evs) >= 2, evs
        return evs

    evs = await eventually(scaled_events)
    assert any("4->6" in e["message"] and "want 6" in e["message"] for e in evs), evs
    assert all(e["involvedObject"]["kind"] == "Deployment" for e in evs)

    before = await get(kube, "apps/v1", "deployments", ns, "web")

    # an older seq; an equal seq with a different body; replicas above max
    older = await stack.send(decision(wl, 1, 3, policy=pol))
    twin = await stack.send(decision(wl, 2, 5, policy=pol))
    above = await stack.send(decision(wl, 3, 20, policy=pol))
    refused = {d.decision_id: await stack.outcome(d) for d in (older, twin, above)}
    assert refused[older.decision_id].outcome == "refused"
    assert refused[older.decision_id].reason.startswith("stale: seq 1 < applied seq 2")
    assert refused[twin.decision_id].outcome == "refused"
    assert refused[twin.decision_id].reason.startswith("seq_conflict:")
    assert refused[above.decision_id].outcome == "refused"
    assert refused[above.decision_id].reason == (
        f"above_max: to_replicas 20 > maxReplicas 8 ({ns}/web)"
    )

    after = await get(kube, "apps/v1", "deployments", ns, "web")
    assert after["spec"]["replicas"] == 6
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert annotations(after)[ANN_SEQ] == "2"

    async def refused_status() -> dict[str, Any]:
        s = await policy_status(kube, ns, "web")
        assert s["lastReason"].startswith("above_max"), s
        return s

    status = await eventually(refused_status)
    c = condition(status)
    assert (c["status"], c["reason"]) == ("False", "AboveMax")
    assert status["lastDecisionId"] == d2.decision_id  # still the last applied
    refusals = [e for e in await events_for(kube, ns, "web") if e["reason"] == "GovernorRefused"]
    assert any("above_max" in e["message"] and e["type"] == "Warning" for e in refusals)
    # stale replays are quiet: no Event for them
    assert not any(older.decision_id in e["message"] for e in refusals)

    # a namespace outside the allowed list: the same Deployment there is untouched
    await kube.apply(deployment(stack.denied_ns, "web", 2), field_manager="tests")
    elsewhere = await stack.send(decision(f"{stack.denied_ns}/Deployment/web", 9, 5))
    a = await stack.outcome(elsewhere)
    assert a.outcome == "refused" and a.reason.startswith("namespace_not_allowed:"), a
    other = await get(kube, "apps/v1", "deployments", stack.denied_ns, "web")
    assert other["spec"]["replicas"] == 2 and ANN_SEQ not in annotations(other)

    metrics = await stack.process.metrics()
    assert re.search(
        r'governor_actuator_actuations_total\{outcome="refused",reason="above_max"\} [1-9]', metrics
    )
    assert re.search(
        r'governor_actuator_actuations_total\{outcome="applied",reason="metric"\} [1-9]', metrics
    )
    count = re.search(r"governor_actuator_decision_to_patch_seconds_count (\S+)", metrics)
    assert count is not None and float(count.group(1)) >= 2


# --- a Volcano Job: a task's replicas and the job's minAvailable -------------------------------


async def test_volcano_job(stack: Stack) -> None:
    kube, ns = stack.kube, stack.ns
    await kube.apply(volcano_job(ns, "train"), field_manager="tests")
    ref = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": "train",
        "task": "worker",
        "scaleMinAvailable": True,
    }
    await kube.apply(scaling_policy(ns, "train", ref, max_replicas=6), field_manager="tests")
    wl, pol = f"{ns}/Job/train", f"{ns}/train"

    d1 = await stack.send(decision(wl, 1, 4, policy=pol, frm=2, min_available=4))
    a1 = await stack.outcome(d1)
    assert a1.outcome == "applied", a1
    job = await get(kube, "batch.volcano.sh/v1alpha1", "jobs", ns, "train")
    assert [t["replicas"] for t in job["spec"]["tasks"]] == [1, 4]
    assert job["spec"]["minAvailable"] == 4
    assert annotations(job)[ANN_SEQ] == "1"

    # shrinking below the gang: minAvailable follows the new total (1 ps + 1 worker)
    d2 = await stack.send(decision(wl, 2, 1, policy=pol, frm=4))
    assert (await stack.outcome(d2)).outcome == "applied"
    job = await get(kube, "batch.volcano.sh/v1alpha1", "jobs", ns, "train")
    assert [t["replicas"] for t in job["spec"]["tasks"]] == [1, 1]
    assert job["spec"]["minAvailable"] == 2

    above = await stack.send(decision(wl, 3, 7, policy=pol))
    a = await stack.outcome(above)
    assert a.outcome == "refused" and a.reason.startswith("above_max"), a

    # Volcano's admission rules (CEL in the fixture): tasks cannot be added
    with pytest.raises(KubeError) as err:
        await kube.json_patch(
            "batch.volcano.sh/v1alpha1",
            "jobs",
            "train",
            [{"op": "add", "path": "/spec/tasks/-", "value": {"name": "extra", "replicas": 1}}],
            namespace=ns,
        )
    assert err.value.status == 422 and "may not add or remove tasks" in err.value.message

    evs = await eventually(lambda: _has_event(kube, ns, "train", "GovernorScaled"), within_s=20)
    assert evs[0]["involvedObject"]["apiVersion"] == "batch.volcano.sh/v1alpha1"


async def _has_event(kube: Kube, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    evs = [e for e in await events_for(kube, ns, name) if e["reason"] == reason]
    assert evs, f"no {reason} event on {name}"
    return evs


# --- a PyTorchJob: the CRD's specReplicasPath --------------------------------------------------


async def test_pytorchjob_through_its_scale_subresource_path(stack: Stack) -> None:
    kube, ns = stack.kube, stack.ns
    await kube.apply(pytorch_job(ns, "bert", 2), field_manager="tests")
    ref = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert"}
    await kube.apply(scaling_policy(ns, "bert", ref), field_manager="tests")
    d = await stack.send(decision(f"{ns}/PyTorchJob/bert", 1, 5, policy=f"{ns}/bert", frm=2))
    a = await stack.outcome(d)
    assert (a.outcome, a.from_replicas) == ("applied", 2), a
    job = await get(kube, "kubeflow.org/v1", "pytorchjobs", ns, "bert")
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 5
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    scale = await kube.get(
        "kubeflow.org/v1", "pytorchjobs", "bert", namespace=ns, subresource="scale"
    )
    assert scale["spec"]["replicas"] == 5
    # no `policy` in the decision: the actuator finds the ScalingPolicy by its target
    d2 = await stack.send(decision(f"{ns}/PyTorchJob/bert", 2, 3))
    assert (await stack.outcome(d2)).outcome == "applied"
    job = await get(kube, "kubeflow.org/v1", "pytorchjobs", ns, "bert")
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3


# --- paused, HPA- and KEDA-owned targets --------------------------------------------------------


async def test_paused_target_is_untouched(stack: Stack) -> None:
    kube, ns = stack.kube, stack.ns
    await kube.apply(deployment(ns, "frozen", 3, **{ANN_PAUSED: "true"}), field_manager="tests")
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "frozen"}
    await kube.apply(scaling_policy(ns, "frozen", ref), field_manager="tests")
    before = await get(kube, "apps/v1", "deployments", ns, "frozen")
    d = await stack.send(decision(f"{ns}/Deployment/frozen", 1, 7, policy=f"{ns}/frozen"))
    a = await stack.outcome(d)
    assert a.outcome == "refused" and a.reason.startswith("paused:"), a
    after = await get(kube, "apps/v1", "deployments", ns, "frozen")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"]["replicas"] == 3


@pytest.mark.parametrize(
    ("owner", "code", "word"),
    [("hpa", "owned_by_hpa", "HorizontalPodAutoscaler"), ("keda", "owned_by_keda", "ScaledObject")],
)
async def test_targets_scaled_by_hpa_or_keda_are_refused(
    stack: Stack, owner: str, code: str, word: str
) -> None:
    kube, ns = stack.kube, stack.ns
    name = f"{owner}-web"
    await kube.apply(deployment(ns, name, 2), field_manager="tests")
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    await kube.apply(scaling_policy(ns, name, ref), field_manager="tests")
    other = (
        hpa(ns, f"{name}-hpa", name) if owner == "hpa" else scaled_object(ns, f"{name}-so", name)
    )
    await kube.apply(other, field_manager="tests")
    # the actuator reuses a namespace's HPA/ScaledObject lists for owner_ttl_seconds (0.2 here)
    await asyncio.sleep(2 * stack.config["owner_ttl_seconds"])
    d = await stack.send(decision(f"{ns}/Deployment/{name}", 1, 5, policy=f"{ns}/{name}"))
    a = await stack.outcome(d)
    assert a.outcome == "refused" and a.reason.startswith(f"{code}:"), a
    assert word in a.reason
    obj = await get(kube, "apps/v1", "deployments", ns, name)
    assert obj["spec"]["replicas"] == 2 and ANN_SEQ not in annotations(obj)
    evs = await eventually(lambda: _has_event(kube, ns, name, "GovernorRefused"))
    assert word in evs[0]["message"] and evs[0]["type"] == "Warning"
    status = await eventually(lambda: _refused_condition(kube, ns, name))
    assert condition(status)["reason"] == ("OwnedByHpa" if owner == "hpa" else "OwnedByKeda")


async def _refused_condition(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    s = await policy_status(kube, ns, name)
    assert condition(s)["status"] == "False", s
    return s


# --- the API server rejects an invalid ScalingPolicy, naming the field --------------------------


def _valid_policy(ns: str) -> dict[str, Any]:
    doc = yaml.safe_load((REPO / "examples" / "web-policy.yaml").read_text())
    doc["metadata"]["namespace"] = ns
    return dict(doc)


def _with(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return out


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "field_path", "words"),
    [
        ("spec.minReplicas", 50, "spec.maxReplicas", "maxReplicas must be >= minReplicas"),
        ("spec.fallback.replicas", 41, "spec.fallback.replicas", "within minReplicas..maxReplicas"),
        ("spec.minReplicas", 0, "spec.minReplicas", "requires spec.scaleToZero"),
        (
            "spec.metrics.0.target",
            {"type": "Value"},
            "spec.metrics[0].target.value",
            "value is required for target type Value",
        ),
        (
            "spec.metrics.0.source",
            {"type": "kafka_lag", "topic": "orders"},
            "spec.metrics[0].source",
            "topic and consumerGroup are required",
        ),
        (
            "spec.metrics.0.source",
            {"type": "prometheus", "query": "up", "topic": "orders"},
            "spec.metrics[0].source",
            "only allowed for source type kafka_lag",
        ),
        (
            "spec.metrics.0.source",
            {"type": "graphite"},
            "spec.metrics[0].source.type",
            "Unsupported value",
        ),
        (
            "spec.targetRef",
            {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train"},
            "spec.targetRef.task",
            "must name the task",
        ),
        ("spec.panic.windowSeconds", 60, "spec.panic.windowSeconds", "shorter than"),
        (
            "spec.behavior.scaleUp.stabilizationWindowSeconds",
            4000,
            "stabilizationWindowSeconds",
            "3600",
        ),
        ("spec.behavior.scaleUp.tolerance", "1.5", "spec.behavior.scaleUp.tolerance", "[0, 1)"),
        ("spec.maxReplicas", _DELETE, "spec.maxReplicas", "Required value"),
        ("spec.weight", 0, "spec.weight", "greater than 0"),
    ],
)
async def test_invalid_scaling_policy_is_rejected_naming_the_field(
    admin: Kube,  # noqa: F811
    stack: Stack,
    path: str,
    value: Any,
    field_path: str,
    words: str,
) -> None:
    doc = _with(_valid_policy(stack.ns), path, value)
    doc["metadata"]["name"] = unique("bad")
    with pytest.raises(KubeError) as err:
        await admin.create("governor.dev/v1alpha1", "scalingpolicies", doc, namespace=stack.ns)
    e = err.value
    assert e.status == 422 and e.reason == "Invalid", e
    assert field_path in e.message and words in e.message, e.message


async def test_valid_policies_round_trip_through_the_api_server(
    admin: Kube,  # noqa: F811
    stack: Stack,
) -> None:
    """What spec.py accepts, the CRD accepts, and what the API server returns decodes again."""
    full = _valid_policy(stack.ns)
    full["metadata"]["name"] = unique("full")
    spec = full["spec"]
    spec["behavior"]["scaleUp"]["tolerance"] = "0.05"
    spec["behavior"]["scaleDown"]["tolerance"] = "50m"
    spec["replicaCap"] = 30
    spec["weight"] = 2.5
    spec["pool"] = "gpu"
    spec["scaleToZero"] = {"activationThreshold": 1.5, "cooldownSeconds": 120}
    spec["minReplicas"] = 0
    spec["fallback"]["replicas"] = 0
    spec["elastic"] = {"floor": 0, "restartPenaltySeconds": 30, "scalingEfficiency": 0.9}
    spec["metrics"] += [
        {
            "name": "lag",
            "aggregation": "max",
            "target": {"type": "AverageValue", "averageValue": 100},
            "source": {
                "type": "kafka_lag",
                "topic": "orders",
                "consumerGroup": "billing",
                "lagThreshold": 100,
                "offsetResetPolicy": "earliest",
                "excludePersistentLag": True,
            },
        },
        {
            "name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 70},
            "source": {"type": "resource", "resource": "cpu"},
        },
        {
            "name": "p95",
            "aggregation": "p95",
            "target": {"type": "Value", "value": 0.25},
            "source": {"type": "prometheus", "query": "histogram_quantile(0.95, x)"},
        },
    ]
    local = policy_from_obj(full)  # spec.py agrees it is valid
    created = await admin.create(
        "governor.dev/v1alpha1", "scalingpolicies", full, namespace=stack.ns
    )
    back = policy_from_obj(created)
    assert back.spec == local.spec


# --- server-side dry run (in-process actuator, admin client) -----------------------------------


async def test_dry_run_validates_but_changes_nothing(stack: Stack) -> None:
    kube, ns = stack.kube, stack.ns
    await kube.apply(deployment(ns, "dry", 2), field_manager="tests")
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "dry"}
    await kube.apply(scaling_policy(ns, "dry", ref), field_manager="tests")
    settings = ActuatorSettings(allowed_namespaces=[ns], dry_run=True)
    actuator = Actuator(kube, settings)
    before = await get(kube, "apps/v1", "deployments", ns, "dry")
    a = await actuator.handle(decision(f"{ns}/Deployment/dry", 1, 5, policy=f"{ns}/dry"))
    assert a.outcome == "dry_run", a
    after = await get(kube, "apps/v1", "deployments", ns, "dry")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"]["replicas"] == 2
    # the API server still validates in dry run: a negative replica count would be rejected
    obj_status = await policy_status(kube, ns, "dry")
    assert "lastDecisionId" not in obj_status


async def test_refusals_that_need_the_api_server(stack: Stack) -> None:
    """No ScalingPolicy, a target that does not exist, a kind not allowed, a policy that says
    another workload -- refused with the reason, nothing written (in-process actuator)."""
    kube, ns = stack.kube, stack.ns
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ghost"}
    await kube.apply(scaling_policy(ns, "ghost", ref), field_manager="tests")
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}
    await kube.apply(scaling_policy(ns, "db", sts), field_manager="tests")
    actuator = Actuator(
        kube, ActuatorSettings(allowed_namespaces=[ns], allowed_kinds=["Deployment.apps"])
    )
    cases = [
        (decision(f"{ns}/Deployment/nobody", 1, 2), "no_policy"),
        (decision(f"{ns}/Deployment/ghost", 1, 2, policy=f"{ns}/ghost"), "target_not_found"),
        (decision(f"{ns}/StatefulSet/db", 1, 2, policy=f"{ns}/db"), "kind_not_allowed"),
        (decision(f"{ns}/Deployment/web", 1, 2, policy=f"{ns}/ghost"), "policy_mismatch"),
    ]
    for d, code in cases:
        a = await actuator.handle(d)
        assert a.outcome == "refused" and a.reason.startswith(f"{code}:"), (code, a)
    await actuator.drain()


# --- restart: replays change nothing ------------------------------------------------------------


async def test_replay_after_restart_changes_nothing(stack: Stack) -> None:
    """Stop the actuator (SIGTERM: clean exit), start a new one that reads the decisions topic from
    the beginning (a new consumer group: the worst case of lost offsets). Every decision that was
    applied is audited again without a patch -- a `replay` when the target's fence holds its seq,
    refused as stale when a later one was applied since -- and no target changes."""
    kube, ns = stack.kube, stack.ns
    applied = [
        d
        for d in stack.sent
        if any(a.outcome == "applied" for a in stack.actuations.of(d.decision_id))
    ]
    assert len(applied) >= 6, applied
    targets = [
        ("apps/v1", "deployments", "web"),
        ("batch.volcano.sh/v1alpha1", "jobs", "train"),
        ("kubeflow.org/v1", "pytorchjobs", "bert"),
    ]
    before = {t: await get(kube, t[0], t[1], ns, t[2]) for t in targets}

    code = stack.process.stop()
    assert code == 0, stack.process.logs()
    assert "actuator stopped" in stack.process.logs()

    restarted = ActuatorProcess(
        {**stack.config, "group_id": unique("actuator-replay")}, stack.process.workdir
    )
    restarted.start()
    try:
        await restarted.wait_ready()
        last: dict[str, int] = {}  # the seq on each target's fence: the top one patched
        for d in stack.sent:
            if any(a.outcome in ("applied", "noop") for a in stack.actuations.of(d.decision_id)):
                last[d.workload] = max(last.get(d.workload, 0), d.seq)
        for d in applied:
            a = await stack.outcome(d, count=2)  # its second actuation: the redelivery
            if d.seq == last[d.workload]:
                assert a.outcome == "replay" and "already applied" in a.reason, (d, a)
            else:
                assert a.outcome == "refused" and a.reason.startswith("stale:"), (d, a)
        # the same message produced again after the restart: a replay again
        again = await stack.send(applied[-1])
        a = await stack.outcome(again, count=3)
        assert a.outcome == "replay", a
        for t, obj in before.items():
            now = await get(kube, t[0], t[1], ns, t[2])
            assert now["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"], t
        # and the new process keeps working
        d = await stack.send(decision(f"{ns}/Deployment/web", 10, 3, policy=f"{ns}/web"))
        assert (await stack.outcome(d)).outcome == "applied"
        obj = await get(kube, "apps/v1", "deployments", ns, "web")
        assert obj["spec"]["replicas"] == 3 and annotations(obj)[ANN_SEQ] == "10"
    finally:
        assert restarted.stop() == 0
    stack.process = restarted
