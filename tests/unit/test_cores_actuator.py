"""governor.cores.actuator: the order of the checks in one `decide`, the reads it asks for, the
verdict on a failed patch and the Event of each outcome."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.cores import actuator as c
from governor.policy import actuation as a
from governor.spec import PolicyError
from tests.unit.test_policy_actuation import RULES, apply_patch, decision, deployment, policy

NO_OWNERS = c.Owners([], [])


def run(d: Any, found: dict[str, Any]) -> tuple[c.Patch | c.Replayed | c.Refused, list[str]]:
    """`decide` driven like the shell drives it, recording the reads it asked for."""
    reads: list[str] = []
    p: Any = c.UNREAD
    owners: Any = c.UNREAD
    target: Any = c.UNREAD
    while isinstance(v := c.decide(d, p, owners, target, RULES), c.Need):
        reads.append(v.what)
        assert reads.count(v.what) == 1, "asked twice for the same read"
        if v.what == "policy":
            p = found["policy"]
        elif v.what == "owners":
            owners = found.get("owners", NO_OWNERS)
        else:
            target = found["target"]
    return v, reads


def test_a_good_decision_reads_all_three_then_patches() -> None:
    v, reads = run(
        decision(to=4),
        {"policy": policy(), "target": c.TargetRead(pointer="/spec/replicas", obj=deployment(2))},
    )
    assert reads == ["policy", "owners", "target"]
    assert isinstance(v, c.Patch) and v.state.replicas == 2
    assert apply_patch(deployment(2), v.plan.patch)["spec"]["replicas"] == 4
    assert c.outcome_of(v, dry_run=False) == "applied" and c.outcome_of(v, True) == "dry_run"


def test_a_malformed_decision_is_refused_before_any_read_and_quietly() -> None:
    v, reads = run(decision(seq=0), {})
    assert reads == [] and isinstance(v, c.Refused)
    assert v.refusal.code == "invalid_decision" and not v.notify


def test_an_invalid_policy_is_refused_quietly_after_reading_it() -> None:
    v, reads = run(decision(), {"policy": PolicyError("spec.metrics", "required")})
    assert reads == ["policy"] and isinstance(v, c.Refused)
    assert v.refusal.code == "invalid_policy" and not v.notify


def test_admission_stops_before_the_owners_are_read() -> None:
    v, reads = run(decision(to=11), {"policy": policy(max_replicas=10)})
    assert reads == ["policy"] and isinstance(v, c.Refused) and v.refusal.code == "above_max"
    v, reads = run(decision(), {"policy": None})
    assert reads == ["policy"] and isinstance(v, c.Refused) and v.refusal.code == "no_policy"


def test_another_autoscaler_stops_before_the_target_is_read() -> None:
    hpa = {
        "metadata": {"name": "h"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"}},
    }
    v, reads = run(decision(), {"policy": policy(), "owners": c.Owners([hpa], [])})
    assert reads == ["policy", "owners"]
    assert isinstance(v, c.Refused) and v.refusal.code == "owned_by_hpa" and v.notify


@pytest.mark.parametrize(
    ("target", "code"),
    [
        (c.TargetRead(scalable=False), "invalid_policy"),
        (c.TargetRead(pointer="/spec/replicas", obj=None), "target_not_found"),
    ],
)
def test_what_the_target_read_found_can_refuse(target: c.TargetRead, code: str) -> None:
    v, _ = run(decision(), {"policy": policy(), "target": target})
    assert isinstance(v, c.Refused) and v.refusal.code == code and v.notify


def test_a_stale_decision_is_refused_with_the_state_it_was_checked_against() -> None:
    obj = deployment(3, annotations={a.ANN_SEQ: "9"})
    v, _ = run(decision(seq=5), {"policy": policy(), "target": c.TargetRead(obj=obj)})
    assert isinstance(v, c.Refused) and v.refusal.code == "stale"
    assert v.state is not None and v.state.replicas == 3


def test_a_decision_already_on_the_fence_is_a_replay_with_no_patch() -> None:
    """The actuator patched, then died before its audit send: the redelivered decision (to it
    restarted, or to the other actuator) finds its own seq and digest on the target."""
    d = decision(seq=5, to=4)
    found = {
        "policy": policy(),
        "target": c.TargetRead(pointer="/spec/replicas", obj=deployment(2)),
    }
    first, _ = run(d, found)
    assert isinstance(first, c.Patch)
    patched = apply_patch(deployment(2), first.plan.patch)
    again, reads = run(d, {**found, "target": c.TargetRead(pointer="/spec/replicas", obj=patched)})
    assert reads == ["policy", "owners", "target"]
    assert isinstance(again, c.Replayed) and again.state.replicas == 4
    # the same seq with another body is not a replay: a conflict, refused
    other, _ = run(
        decision(seq=5, to=3),
        {**found, "target": c.TargetRead(pointer="/spec/replicas", obj=patched)},
    )
    assert isinstance(other, c.Refused) and other.refusal.code == "seq_conflict"
    # applied, then paused: still a replay (it was applied; there is nothing to pause)
    paused = apply_patch(
        patched,
        [{"op": "add", "path": "/metadata/annotations/governor.dev~1paused", "value": "true"}],
    )
    held, _ = run(d, {**found, "target": c.TargetRead(pointer="/spec/replicas", obj=paused)})
    assert isinstance(held, c.Replayed)


@given(
    seq=st.integers(-2, 20),
    to=st.integers(-2, 15),
    applied=st.none() | st.integers(1, 20),
    replicas=st.integers(0, 12),
    same_digest=st.booleans(),
)
def test_decide_is_the_same_verdict_as_the_seven_calls_in_order(
    seq: int, to: int, applied: int | None, replicas: int, same_digest: bool
) -> None:
    """The old shell's order, written out: precheck, admit, other_owners, read_target, then a
    replay when the fence holds this decision, else plan."""
    d = decision(seq=seq, to=to)
    p = policy()
    ann = {a.ANN_SEQ: str(applied)} if applied else {}
    if applied and same_digest:
        ann[a.ANN_DIGEST] = a.decision_digest(d)
    obj = deployment(replicas, annotations=ann)
    v, _ = run(d, {"policy": p, "target": c.TargetRead(pointer="/spec/replicas", obj=obj)})
    expected: Any = (
        a.precheck(d, RULES) or a.admit(d, p, RULES) or a.other_owners(p.spec.target_ref, [], [])
    )
    if expected is None:
        state = a.read_target(obj, p.spec.target_ref, "/spec/replicas")
        assert not isinstance(state, a.Refusal)
        if a.is_replay(d, state.annotations, a.decision_digest(d)):
            assert isinstance(v, c.Replayed) and applied == seq and same_digest
            return
        expected = a.plan(d, p, state, digest=a.decision_digest(d))
    if isinstance(expected, a.Refusal):
        assert isinstance(v, c.Refused) and v.refusal == expected
    else:
        assert isinstance(v, c.Patch) and v.plan == expected


@pytest.mark.parametrize(
    ("status", "causes", "attempt", "verdict"),
    [
        (409, False, 1, "reread"),
        (422, False, 1, "reread"),
        (422, False, 3, "raise"),  # the last attempt: the fence kept moving
        (422, True, 1, "rejected"),  # a validation error names its causes
        (400, False, 1, "rejected"),
        (403, False, 1, "rejected"),
        (500, False, 1, "raise"),
        (404, False, 1, "raise"),
    ],
)
def test_what_a_failed_patch_means(status: int, causes: bool, attempt: int, verdict: str) -> None:
    assert c.patch_error(status, causes, attempt, attempts=3) == verdict


@pytest.mark.parametrize(
    ("outcome", "reason", "kind", "message"),
    [
        ("applied", "GovernorScaled", "Normal", "scaled 2->4 (seq 5, d-5): why"),
        ("noop", "GovernorUnchanged", "Normal", "seq 5 (d-5): why"),
        ("refused", "GovernorRefused", "Warning", "refused seq 5 (d-5): why"),
        ("failed", "GovernorFailed", "Warning", "seq 5 (d-5) failed: why"),
    ],
)
def test_each_outcome_has_its_event(outcome: Any, reason: str, kind: str, message: str) -> None:
    ev = c.event(policy(), decision(), outcome, "why", {"uid": "u1"}, 2, instance="i", now="t")
    assert (ev["reason"], ev["type"], ev["message"]) == (reason, kind, message)
    assert ev["involvedObject"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
        "namespace": "shop",
        "uid": "u1",
    }
