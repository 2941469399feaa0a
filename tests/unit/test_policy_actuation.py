"""governor.policy.actuation: admission, fencing, the JSON patch, status, pacing."""

from __future__ import annotations

import copy
import functools
import random
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.events import Reason, ScaleDecision
from governor.policy import actuation as a
from governor.policy import pacing, status
from governor.spec import TargetRef
from governor.targets import kind_of
from tests.support.policies import scaling_policy

NS = "shop"
RULES = a.ActuatorRules(allowed_namespaces=frozenset({NS, "ml"}))


def policy(
    *,
    name: str = "web",
    kind: str = "Deployment",
    api_version: str = "apps/v1",
    target: str = "web",
    namespace: str = NS,
    min_replicas: int = 1,
    max_replicas: int = 10,
    annotations: dict[str, str] | None = None,
    spec_extra: dict[str, Any] | None = None,
    **ref: Any,
) -> Any:
    spec: dict[str, Any] = {
        "targetRef": {"kind": kind, "name": target, "apiVersion": api_version, **ref},
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "metrics": [{"name": "rps", "target": {"type": "AverageValue", "averageValue": 10}}],
        **(spec_extra or {}),
    }
    return scaling_policy(name, namespace, spec, annotations=annotations or {})


def volcano_policy(**kw: Any) -> Any:
    return policy(
        name="train",
        kind="Job",
        api_version="batch.volcano.sh/v1alpha1",
        target="train",
        namespace="ml",
        task=kw.pop("task", "worker"),
        **kw,
    )


def decision(
    seq: int = 5,
    to: int = 4,
    *,
    workload: str = f"{NS}/Deployment/web",
    policy_key: str = f"{NS}/web",
    **kw: Any,
) -> ScaleDecision:
    return ScaleDecision(
        decision_id=kw.pop("decision_id", f"d-{seq}"),
        workload=workload,
        seq=seq,
        from_replicas=kw.pop("from_replicas", 2),
        to_replicas=to,
        reasons=kw.pop("reasons", [Reason("metric", "rps above target", metric="rps", value=42)]),
        inputs=[],
        policy_generation=1,
        newest_input=100.0,
        decided_at=100.0,
        policy=policy_key,
        **kw,
    )


def deployment(
    replicas: int | None = 2, annotations: dict[str, str] | None = None, rv: str = "7"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": NS, "resourceVersion": rv}
    if annotations is not None:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {} if replicas is None else {"replicas": replicas}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


def volcano_job(
    tasks: list[tuple[str, int | None, int | None]],
    min_available: int | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"tasks": []}
    for name, replicas, min_av in tasks:
        t: dict[str, Any] = {"name": name}
        if replicas is not None:
            t["replicas"] = replicas
        if min_av is not None:
            t["minAvailable"] = min_av
        spec["tasks"].append(t)
    if min_available is not None:
        spec["minAvailable"] = min_available
    meta: dict[str, Any] = {"name": "train", "namespace": "ml", "resourceVersion": "3"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": meta,
        "spec": spec,
    }


# --- a small RFC 6902 applier, to check what the patches do ----------------------------------


class PatchTestFailed(Exception):
    pass


def _walk(doc: Any, pointer: str) -> tuple[Any, str]:
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    node = doc
    for t in tokens[:-1]:
        node = node[int(t)] if isinstance(node, list) else node[t]
    return node, tokens[-1]


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for op in ops:
        parent, key = _walk(out, op["path"])
        idx: Any = int(key) if isinstance(parent, list) else key
        if op["op"] == "test":
            try:
                have = parent[idx]
            except (KeyError, IndexError):
                raise PatchTestFailed(op["path"]) from None
            if have != op["value"]:
                raise PatchTestFailed(op["path"])
        elif op["op"] == "add":
            parent[idx] = copy.deepcopy(op["value"])
        elif op["op"] == "replace":
            if isinstance(parent, dict) and idx not in parent:
                raise KeyError(op["path"])
            parent[idx] = copy.deepcopy(op["value"])
        else:  # pragma: no cover
            raise AssertionError(op)
    return out


def bump_rv(doc: dict[str, Any]) -> dict[str, Any]:
    doc["metadata"]["resourceVersion"] = str(int(doc["metadata"]["resourceVersion"]) + 1)
    return doc


# --- identities -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("shop/Deployment/web", True),
        ("ml/PyTorchJob/bert-large", True),
        ("shop/Deployment", False),
        ("shop/Deployment/web/x", False),
        ("Shop/Deployment/web", False),
        ("shop/9Deployment/web", False),
        ("shop/Deployment/", False),
        ("", False),
    ],
)
def test_parse_workload(text: str, ok: bool) -> None:
    assert (a.parse_workload(text) is not None) is ok


def test_kind_key_and_group() -> None:
    assert a.kind_key("Deployment", "apps/v1") == "Deployment.apps"
    assert a.kind_key("Job", "batch.volcano.sh/v1alpha1") == "Job.batch.volcano.sh"
    assert a.kind_key("Pod", "v1") == "Pod"
    assert a.api_group("v1") == ""
    asks = TargetRef(
        kind="Job", name="x", api_version="batch.volcano.sh/v1", scale_min_available=True
    )
    assert kind_of(asks).moves_min_available(asks)
    batch = TargetRef(kind="Job", name="x", api_version="batch/v1", scale_min_available=True)
    assert not kind_of(batch).moves_min_available(batch)


def test_digest_is_stable_and_sensitive_to_the_body() -> None:
    d = decision()
    again = msgspec.json.decode(msgspec.json.encode(d), type=ScaleDecision)
    assert a.decision_digest(d) == a.decision_digest(again)
    assert a.decision_digest(d) != a.decision_digest(decision(to=5))
    assert a.decision_digest(d) != a.decision_digest(decision(decision_id="other"))
    assert len(a.decision_digest(d)) == 16


def test_reason_text() -> None:
    reasons = [
        Reason("metric", "rps 42 over target 10", metric="rps", value=42.0),
        Reason("max", "capped at maxReplicas", value=10),
        Reason("tolerance"),
    ]
    assert a.reason_text(reasons) == (
        "metric(rps=42): rps 42 over target 10; max(10): capped at maxReplicas; tolerance"
    )
    assert a.reason_text([]) == "unspecified"
    long = a.reason_text([Reason("metric", "x" * 1000)], limit=50)
    assert len(long) == 50 and long.endswith("…")


# --- precheck and admit -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("d", "code"),
    [
        (decision(workload="nope"), "invalid_decision"),
        (decision(seq=0), "invalid_decision"),
        (decision(to=-1), "invalid_decision"),
        (decision(min_available=-1), "invalid_decision"),
        (decision(workload="kube-system/Deployment/web", policy_key=""), "namespace_not_allowed"),
        (decision(policy_key="other/web"), "policy_mismatch"),
        (decision(policy_key="shop"), "policy_mismatch"),
    ],
)
def test_precheck_refuses(d: ScaleDecision, code: str) -> None:
    r = a.precheck(d, RULES)
    assert r is not None and r.code == code
    assert r.reason.startswith(f"{code}: ")


def test_precheck_star_allows_every_namespace() -> None:
    rules = a.ActuatorRules(allowed_namespaces=frozenset({"*"}))
    d = decision(workload="kube-system/Deployment/web", policy_key="kube-system/web")
    assert a.precheck(d, rules) is None
    assert a.precheck(d, a.ActuatorRules(allowed_namespaces=frozenset())) is not None


def test_admit_happy_path() -> None:
    assert a.admit(decision(to=10), policy(), RULES) is None
    assert a.admit(decision(to=1), policy(), RULES) is None


@pytest.mark.parametrize(
    ("d", "p", "code"),
    [
        (decision(), None, "no_policy"),
        (decision(), policy(target="api"), "policy_mismatch"),
        (
            decision(target=TargetRef(kind="StatefulSet", name="web")),
            policy(),
            "policy_mismatch",
        ),
        (
            decision(target=TargetRef(kind="Deployment", name="web", api_version="extensions/v1")),
            policy(),
            "policy_mismatch",
        ),
        (
            decision(workload=f"{NS}/ReplicaSet/web"),
            policy(kind="ReplicaSet"),
            "kind_not_allowed",
        ),
        (decision(), policy(annotations={a.ANN_PAUSED: "true"}), "paused"),
        (decision(to=0), policy(), "below_min"),
        (decision(to=11), policy(), "above_max"),
        (decision(to=6), policy(spec_extra={"replicaCap": 5}), "above_max"),
        (decision(min_available=2), policy(), "policy_mismatch"),
    ],
)
def test_admit_refuses(d: ScaleDecision, p: Any, code: str) -> None:
    r = a.admit(d, p, RULES)
    assert r is not None, code
    assert r.code == code


def test_admit_paused_false_is_not_paused_and_cap_names_itself() -> None:
    assert a.admit(decision(), policy(annotations={a.ANN_PAUSED: "false"}), RULES) is None
    r = a.admit(decision(to=6), policy(spec_extra={"replicaCap": 5}), RULES)
    assert r is not None and "replicaCap 5" in r.detail
    r = a.admit(decision(to=11), policy(), RULES)
    assert r is not None and "maxReplicas 10" in r.detail


def test_admit_volcano_min_available_needs_the_policy_to_ask() -> None:
    d = decision(workload="ml/Job/train", policy_key="ml/train", min_available=2)
    assert a.admit(d, volcano_policy(), RULES) is not None
    assert a.admit(d, volcano_policy(scaleMinAvailable=True), RULES) is None


# --- reading the target -----------------------------------------------------------------------


def test_pointers() -> None:
    assert a.to_pointer(".spec.pytorchReplicaSpecs.Worker.replicas") == (
        "/spec/pytorchReplicaSpecs/Worker/replicas"
    )
    assert a.to_pointer("/spec/replicas") == "/spec/replicas"
    assert a.to_pointer(".a/b.c~d") == "/a~1b/c~0d"
    with pytest.raises(ValueError, match="dotted"):
        a.to_pointer("spec.replicas")
    with pytest.raises(ValueError, match="empty"):
        a.to_pointer(".spec..replicas")
    doc = {"spec": {"a/b": [1, {"c": 2}]}}
    assert a.resolve_pointer(doc, "/spec/a~1b/1/c") == 2
    assert a.resolve_pointer(doc, "/spec/a~1b/5/c") is None
    assert a.resolve_pointer(doc, "/spec/x/y") is None
    assert a.escape_pointer("governor.dev/decision-seq") == "governor.dev~1decision-seq"


def test_read_target_deployment_and_crd() -> None:
    ref = policy().spec.target_ref
    t = a.read_target(deployment(3, {"x": "y"}), ref)
    assert isinstance(t, a.TargetState)
    assert (t.replicas, t.replicas_pointer, t.resource_version) == (3, "/spec/replicas", "7")
    assert t.annotations == {"x": "y"}
    t = a.read_target(deployment(None), ref)
    assert isinstance(t, a.TargetState) and t.replicas is None and t.annotations is None
    pt = {
        "metadata": {"name": "bert", "resourceVersion": "1"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4}}},
    }
    ref = TargetRef(kind="PyTorchJob", name="bert", api_version="kubeflow.org/v1")
    t = a.read_target(pt, ref, "/spec/pytorchReplicaSpecs/Worker/replicas")
    assert isinstance(t, a.TargetState) and t.replicas == 4


def test_read_target_volcano() -> None:
    ref = volcano_policy().spec.target_ref
    job = volcano_job([("ps", 1, 1), ("worker", 4, 2)], min_available=3)
    t = a.read_target(job, ref)
    assert isinstance(t, a.TargetState)
    assert t.task_index == 1 and t.replicas == 4 and t.min_available == 3
    assert t.replicas_pointer == "/spec/tasks/1/replicas"
    missing = a.read_target(volcano_job([("ps", 1, None)]), ref)
    assert isinstance(missing, a.Refusal) and missing.code == "task_not_found"
    assert "ps" in missing.detail


# --- ownership --------------------------------------------------------------------------------


def hpa(name: str, kind: str = "Deployment", target: str = "web", api: str = "apps/v1") -> Any:
    ref = {"kind": kind, "name": target, "apiVersion": api}
    return {"metadata": {"name": name}, "spec": {"scaleTargetRef": ref}}


def test_other_owners() -> None:
    ref = policy().spec.target_ref
    assert a.other_owners(ref, [], []) is None
    assert a.other_owners(ref, [hpa("x", target="api"), hpa("y", kind="StatefulSet")], []) is None
    assert a.other_owners(ref, [hpa("z", api="example.com/v1")], []) is None
    r = a.other_owners(ref, [hpa("web-hpa")], [])
    assert r is not None and r.code == "owned_by_hpa" and "web-hpa" in r.detail
    so = {"metadata": {"name": "web-so"}, "spec": {"scaleTargetRef": {"name": "web"}}}
    r = a.other_owners(ref, [hpa("web-hpa")], [so])
    assert r is not None and r.code == "owned_by_keda" and "web-so" in r.detail
    # KEDA's default kind is Deployment: a StatefulSet target is not matched by a bare name
    sts = policy(kind="StatefulSet").spec.target_ref
    assert a.other_owners(sts, [], [so]) is None
    pt = TargetRef(kind="PyTorchJob", name="web", api_version="kubeflow.org/v1")
    so_pt = {
        "metadata": {"name": "p"},
        "spec": {
            "scaleTargetRef": {"name": "web", "kind": "PyTorchJob", "apiVersion": "kubeflow.org/v1"}
        },
    }
    assert a.other_owners(pt, [], [so_pt]) is not None
    assert a.other_owners(pt, [], [so]) is None


# --- fence ------------------------------------------------------------------------------------


def test_check_fence() -> None:
    d = decision(seq=5)
    digest = a.decision_digest(d)
    assert a.check_fence(d, None, digest) is None
    assert a.check_fence(d, {a.ANN_SEQ: "4"}, digest) is None
    r = a.check_fence(d, {a.ANN_SEQ: "6"}, digest)
    assert r is not None and r.code == "stale" and "< applied seq 6" in r.detail
    r = a.check_fence(d, {a.ANN_SEQ: "5", a.ANN_DIGEST: digest}, digest)
    assert r is not None and r.code == "stale" and "replay" in r.detail
    r = a.check_fence(d, {a.ANN_SEQ: "5", a.ANN_DIGEST: "0" * 16, a.ANN_ID: "d-x"}, digest)
    assert r is not None and r.code == "seq_conflict" and "d-x" in r.detail
    for bad in ("x", "-3", ""):
        r = a.check_fence(d, {a.ANN_SEQ: bad}, digest)
        assert r is not None and r.code == "fence_corrupt"
    assert a.applied_seq({a.ANN_SEQ: "12"}) == 12
    assert a.applied_seq(None) == 0


# --- plan -------------------------------------------------------------------------------------


def _plan(d: ScaleDecision, obj: dict[str, Any], p: Any = None) -> a.Plan | a.Refusal:
    pol = p or policy()
    t = a.read_target(obj, pol.spec.target_ref)
    assert isinstance(t, a.TargetState)
    return a.plan(d, pol, t)


def test_first_write_without_annotations_tests_the_resource_version() -> None:
    d = decision(seq=1, to=4)
    obj = deployment(2, None)
    p = _plan(d, obj)
    assert isinstance(p, a.Plan)
    assert p.patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert p.patch[1] == {"op": "add", "path": "/metadata/annotations", "value": {}}
    assert {"op": "replace", "path": "/spec/replicas", "value": 4} in p.patch
    assert (p.from_replicas, p.to_replicas, p.changes_replicas) == (2, 4, True)
    out = apply_patch(obj, p.patch)
    assert out["spec"]["replicas"] == 4
    ann = out["metadata"]["annotations"]
    assert ann[a.ANN_SEQ] == "1" and ann[a.ANN_ID] == "d-1"
    assert ann[a.ANN_DIGEST] == a.decision_digest(d)
    assert ann[a.ANN_REASON].startswith("metric(rps=42)")
    # a concurrent writer changed the object after our read: our test fails, nothing lost
    other = bump_rv(
        apply_patch(obj, [{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}])
    )
    with pytest.raises(PatchTestFailed):
        apply_patch(other, p.patch)


def test_first_write_keeps_existing_annotations() -> None:
    obj = deployment(2, {"team": "shop"})
    p = _plan(decision(seq=1), obj)
    assert isinstance(p, a.Plan)
    assert p.patch[0]["path"] == "/metadata/resourceVersion"
    assert all(op["path"] != "/metadata/annotations" for op in p.patch)
    out = apply_patch(obj, p.patch)
    assert out["metadata"]["annotations"]["team"] == "shop"
    assert out["metadata"]["annotations"][a.ANN_SEQ] == "1"


def test_later_writes_test_the_seq_not_the_resource_version() -> None:
    obj = deployment(4, {a.ANN_SEQ: "3", "team": "shop"})
    p = _plan(decision(seq=5, to=6), obj)
    assert isinstance(p, a.Plan)
    assert p.patch[0] == {
        "op": "test",
        "path": "/metadata/annotations/governor.dev~1decision-seq",
        "value": "3",
    }
    assert all(op["path"] != "/metadata/resourceVersion" for op in p.patch)
    # an unrelated change (status, another annotation) does not break the fence
    moved = bump_rv(copy.deepcopy(obj))
    moved["metadata"]["annotations"]["other"] = "x"
    out = apply_patch(moved, p.patch)
    assert out["spec"]["replicas"] == 6 and out["metadata"]["annotations"][a.ANN_SEQ] == "5"
    # a newer governor write does
    newer = copy.deepcopy(obj)
    newer["metadata"]["annotations"][a.ANN_SEQ] = "7"
    with pytest.raises(PatchTestFailed):
        apply_patch(newer, p.patch)


def test_plan_refusals_and_noop() -> None:
    paused = deployment(2, {a.ANN_PAUSED: "true", a.ANN_SEQ: "1"})
    r = _plan(decision(seq=2), paused)
    assert isinstance(r, a.Refusal) and r.code == "paused"
    r = _plan(decision(seq=2), deployment(2, {a.ANN_SEQ: "3"}))
    assert isinstance(r, a.Refusal) and r.code == "stale"
    noop = _plan(decision(seq=2, to=2), deployment(2, {a.ANN_SEQ: "1"}))
    assert isinstance(noop, a.Plan) and not noop.changes_replicas
    assert all(op["path"] != "/spec/replicas" for op in noop.patch)
    assert any(op["path"].endswith("decision-seq") and op["op"] == "add" for op in noop.patch)
    absent = _plan(decision(seq=2, to=3), deployment(None, {a.ANN_SEQ: "1"}))
    assert isinstance(absent, a.Plan)
    assert {"op": "add", "path": "/spec/replicas", "value": 3} in absent.patch


def _vplan(d: ScaleDecision, job: dict[str, Any], **kw: Any) -> a.Plan | a.Refusal:
    return _plan(d, job, volcano_policy(**kw))


def vdecision(seq: int = 2, to: int = 6, **kw: Any) -> ScaleDecision:
    return decision(seq=seq, to=to, workload="ml/Job/train", policy_key="ml/train", **kw)


def test_volcano_patch_tests_the_task_name_and_sets_its_replicas() -> None:
    job = volcano_job([("ps", 1, 1), ("worker", 4, 2)], min_available=3, annotations={})
    p = _vplan(vdecision(to=6), job)
    assert isinstance(p, a.Plan)
    assert {"op": "test", "path": "/spec/tasks/1/name", "value": "worker"} in p.patch
    assert {"op": "replace", "path": "/spec/tasks/1/replicas", "value": 6} in p.patch
    assert all(op["path"] != "/spec/minAvailable" for op in p.patch)
    out = apply_patch(job, p.patch)
    assert out["spec"]["tasks"][1]["replicas"] == 6 and out["spec"]["tasks"][0]["replicas"] == 1
    # the task list was reordered meanwhile: the name test fails
    swapped = copy.deepcopy(job)
    swapped["spec"]["tasks"].reverse()
    with pytest.raises(PatchTestFailed):
        apply_patch(swapped, p.patch)


def test_volcano_min_available() -> None:
    job = volcano_job([("ps", 1, 1), ("worker", 4, 2)], min_available=5, annotations={})
    # shrinking below the job's minAvailable: refused unless the policy moves it
    r = _vplan(vdecision(to=3), job)
    assert isinstance(r, a.Refusal) and r.code == "volcano_constraint"
    p = _vplan(vdecision(to=3), job, scaleMinAvailable=True)
    assert isinstance(p, a.Plan) and p.min_available == 4
    assert {"op": "add", "path": "/spec/minAvailable", "value": 4} in p.patch
    # the decision's floor
    p = _vplan(vdecision(to=6, min_available=3), job, scaleMinAvailable=True)
    assert isinstance(p, a.Plan) and p.min_available == 3
    r = _vplan(vdecision(to=3, min_available=5), job, scaleMinAvailable=True)
    assert isinstance(r, a.Refusal) and r.code == "volcano_constraint"
    # unchanged floor: no minAvailable op
    p = _vplan(vdecision(to=6, min_available=5), job, scaleMinAvailable=True)
    assert isinstance(p, a.Plan) and p.min_available is None
    # task minAvailable above the new replicas
    r = _vplan(vdecision(to=1), job, scaleMinAvailable=True)
    assert isinstance(r, a.Refusal) and r.code == "volcano_constraint" and "task worker" in r.detail
    # only minAvailable moves: still a change
    p = _vplan(vdecision(to=4, min_available=2), job, scaleMinAvailable=True)
    assert isinstance(p, a.Plan) and p.changes_replicas


@settings(max_examples=200, deadline=None)
@given(
    seqs=st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=25),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_fence_last_writer_is_the_highest_seq(seqs: list[int], seed: int) -> None:
    """Decisions arrive in any order, duplicated, with interleaved reads: the target ends at the
    highest seq's replicas and the seq annotation never goes down."""
    rnd = random.Random(seed)
    by_seq = {s: decision(seq=s, to=1 + s % 10, decision_id=f"d-{s}") for s in set(seqs)}
    obj = deployment(1, None)
    seen_seq = 0
    # two actuators read the same state, then write in a random order
    pending: list[tuple[ScaleDecision, dict[str, Any]]] = []
    for s in seqs:
        pending.append((by_seq[s], copy.deepcopy(obj)))
        if rnd.random() < 0.5 or s == seqs[-1]:
            rnd.shuffle(pending)
            for d, snapshot in pending:
                for attempt in range(2):
                    view = snapshot if attempt == 0 else obj
                    p = _plan(d, view)
                    if isinstance(p, a.Refusal):
                        assert p.code == "stale"
                        break
                    try:
                        obj = bump_rv(apply_patch(obj, p.patch))
                        break
                    except PatchTestFailed:
                        continue  # re-read and plan again
                now = int((obj["metadata"].get("annotations") or {}).get(a.ANN_SEQ, "0"))
                assert now >= seen_seq
                seen_seq = now
            pending = []
    top = max(seqs)
    assert obj["metadata"]["annotations"][a.ANN_SEQ] == str(top)
    assert obj["spec"]["replicas"] == by_seq[top].to_replicas


# --- status -----------------------------------------------------------------------------------


def test_policy_status_applied_then_refused_then_applied() -> None:
    pol = policy()

    # Each status follows from the previous one, for the same policy at 5 current replicas.
    after = functools.partial(status.policy_status, policy=pol, current_replicas=5)
    d = decision(seq=3, to=5)
    s1 = after(None, decision=d, outcome="applied", reason="ok", current_replicas=2, now="T1")
    assert s1["currentReplicas"] == 5 and s1["desiredReplicas"] == 5
    assert s1["lastDecisionId"] == "d-3" and s1["lastDecisionSeq"] == 3
    assert s1["lastReason"].startswith("metric(rps=42)")
    assert s1["lastTransitionTime"] == "T1"
    (c1,) = s1["conditions"]
    assert (c1["type"], c1["status"], c1["reason"], c1["lastTransitionTime"]) == (
        "Actuated",
        "True",
        "Applied",
        "T1",
    )
    s2 = after(s1, decision=d, outcome="applied", reason="ok", now="T2")
    assert s2["conditions"][0]["lastTransitionTime"] == "T1"  # same status: time kept
    s3 = after(
        s2,
        decision=decision(seq=4, to=50),
        outcome="refused",
        reason="above_max: to_replicas 50 > maxReplicas 10",
        now="T3",
    )
    assert "lastDecisionId" not in s3 and s3["currentReplicas"] == 5
    assert s3["desiredReplicas"] == 50 and s3["lastReason"].startswith("above_max")
    (c3,) = s3["conditions"]
    assert (c3["status"], c3["reason"], c3["lastTransitionTime"]) == ("False", "AboveMax", "T3")
    assert "seq 4" in c3["message"]
    other = {"type": "Other", "status": "True"}
    s4 = after(
        {**s3, "conditions": [*s3["conditions"], other]},
        decision=decision(seq=5, to=5),
        outcome="noop",
        reason="same",
        now="T4",
    )
    assert [c["type"] for c in s4["conditions"]] == ["Other", "Actuated"]
    assert "lastTransitionTime" in s4
    assert s4["observedGeneration"] == 1


def test_condition_reason() -> None:
    assert status.condition_reason("owned_by_hpa") == "OwnedByHpa"
    assert status.condition_reason("stale") == "Stale"
    assert status.condition_reason("") == "Unknown"


# --- pacing -----------------------------------------------------------------------------------


def test_token_bucket() -> None:
    b = pacing.TokenBucket(rate=10, burst=3, now=0.0)
    assert [b.reserve(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.reserve(0.0) == pytest.approx(0.1)
    assert b.reserve(0.0) == pytest.approx(0.2)
    b2 = pacing.TokenBucket(rate=10, burst=3, now=0.0)
    for _ in range(3):
        b2.reserve(0.0)
    assert b2.reserve(1.0) == 0.0  # refilled (capped at burst)
    with pytest.raises(ValueError, match="rate"):
        pacing.TokenBucket(rate=0, burst=1, now=0)


def test_backoff() -> None:
    assert pacing.backoff_seconds(1) == pytest.approx(0.2)
    assert pacing.backoff_seconds(3) == pytest.approx(0.8)
    assert pacing.backoff_seconds(20) == 10.0
    assert pacing.backoff_seconds(1, retry_after=4) == 4.0
    assert pacing.backoff_seconds(1, retry_after=1000) == 30.0
    assert 429 in pacing.RETRYABLE_STATUS and 404 not in pacing.RETRYABLE_STATUS
