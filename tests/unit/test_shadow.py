"""Shadow policies: evaluated beside the Active one, keyed apart, never on the decisions topic."""

from __future__ import annotations

import msgspec

from governor import shadow as sh
from governor.cores.decider import DeciderCore
from governor.events import DECIDER_STATE, SHADOW_DECISIONS, ScaleDecision, access_table
from governor.spec import ScalingPolicy
from tests.unit.test_cores_decider import WL, policy, state, window


def shadow(name: str = "web-shadow", average: float = 35.0) -> ScalingPolicy:
    """The example policy as a Shadow with half the per-pod target: it asks for twice as many."""
    p = policy()
    metric = msgspec.structs.replace(
        p.spec.metrics[0],
        target=msgspec.structs.replace(p.spec.metrics[0].target, average_value=average),
    )
    spec = msgspec.structs.replace(p.spec, mode="Shadow", metrics=[metric])
    meta = msgspec.structs.replace(p.metadata, name=name)
    return msgspec.structs.replace(p, spec=spec, metadata=meta)


def core(load: float, replicas: int, now: float, *shadows: ScalingPolicy) -> DeciderCore:
    c = DeciderCore()
    c.on_policy("shop/web", policy())
    for s in shadows:
        c.on_policy(s.key, s)
    c.on_workload(state(replicas, at=now - 1))
    c.on_window(window(now, load))
    c.on_window(window(now, load, "panic"))
    return c


def test_a_shadow_decides_on_the_same_inputs_under_its_own_key() -> None:
    now = 1000.0
    c = core(280.0, 4, now, shadow())  # 280 rps: active 280/70 = 4 (no change), shadow 280/35 = 8
    out = c.decide(WL, now)
    assert out.decision is None  # the Active policy holds at 4
    (d,) = out.shadow_decisions
    assert (d.policy, d.from_replicas, d.to_replicas, d.seq) == ("shop/web-shadow", 4, 8, 1)
    assert d.decision_id == f"{WL}#shop/web-shadow#1"
    (cp,) = out.shadow_checkpoints
    assert cp.policy == "shop/web-shadow" and DECIDER_STATE.key(cp) == f"{WL}#shop/web-shadow"
    assert out.checkpoint is None or DECIDER_STATE.key(out.checkpoint) == WL
    # The Active policy's memory is its own: seq 0, nothing asked.
    assert c.memory[WL].seq == 0 and c.memory[WL].last_to is None
    assert c.policies[WL].key == "shop/web"


def test_the_shadow_arm_moves_on_its_own_replicas() -> None:
    now = 1000.0
    c = core(280.0, 4, now, shadow())
    assert c.decide(WL, now).shadow_decisions[0].to_replicas == 8
    # Its arm is at 8 now although the target still runs 4: no new shadow decision.
    c.on_window(window(now + 15, 280.0))
    c.on_window(window(now + 15, 280.0, "panic"))
    assert c.decide(WL, now + 15).shadow_decisions == []


def test_a_restored_shadow_checkpoint_never_touches_the_active_memory() -> None:
    now = 1000.0
    c = core(700.0, 2, now, shadow())
    out = c.decide(WL, now)
    assert out.decision is not None and out.checkpoint is not None
    fresh = core(700.0, 2, now, shadow())
    fresh.on_checkpoint(out.checkpoint)
    fresh.on_checkpoint(out.shadow_checkpoints[0])
    assert fresh.memory[WL].seq == out.checkpoint.seq
    assert fresh.shadow_memory[(WL, "shop/web-shadow")].seq == 1
    assert (
        fresh.shadow_memory[(WL, "shop/web-shadow")].replicas == out.shadow_decisions[0].to_replicas
    )


def test_a_policy_turned_shadow_is_no_longer_the_active_one() -> None:
    c = core(280.0, 4, 1000.0)
    c.on_policy("shop/web", msgspec.structs.replace(shadow(), metadata=policy().metadata))
    assert WL not in c.policies
    assert c.decide(WL, 1000.0).shadow_decisions == []  # no Active one: shadows wait
    c.on_policy("shop/web", None)
    assert not c.shadows[WL]


def test_exactly_one_active_and_any_number_of_shadows() -> None:
    assert sh.mode_problems([policy(), shadow("a"), shadow("b")]) == []
    meta = msgspec.structs.replace(policy().metadata, name="web2")
    two = msgspec.structs.replace(policy(), metadata=meta)
    (problem,) = sh.mode_problems([policy(), two, shadow()])
    assert "2 Active policies" in problem
    (lonely,) = sh.mode_problems([shadow()])
    assert "without an Active one" in lonely


def test_the_actuator_cannot_read_shadow_decisions() -> None:
    (row,) = [r for r in access_table() if r.name == SHADOW_DECISIONS.name]
    assert row.writers == ("decider",) and row.readers == ("viewer",) and not row.groups
    assert SHADOW_DECISIONS.type is ScaleDecision
