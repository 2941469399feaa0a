"""DeciderCore: the decider's memory and its two stages, without Kafka."""

from pathlib import Path

import msgspec

from governor.decider import DeciderCore
from governor.events import LoadWindow, WorkloadState
from governor.spec import ScalingPolicy, policies_from_yaml

EXAMPLE = Path(__file__).parents[2] / "examples" / "web-policy.yaml"
WL = "shop/Deployment/web"


def policy() -> ScalingPolicy:
    (p,) = policies_from_yaml(EXAMPLE.read_text())
    return p


def window(end: float, mean: float, kind: str = "stable", closed: bool = False) -> LoadWindow:
    size = 60.0 if kind == "stable" else 6.0
    return LoadWindow(
        workload=WL, metric="rps", window=kind, start=end - size, end=end, count=10,
        mean=mean, max=mean, p95=mean, newest_sample=end - 0.5, closed=closed,
    )  # fmt: skip


def state(spec: int, ready: int | None = None, at: float = 0.0) -> WorkloadState:
    return WorkloadState(
        workload=WL, spec_replicas=spec, ready_replicas=spec if ready is None else ready,
        observed_at=at,
    )  # fmt: skip


def core_with(load: float, replicas: int, now: float) -> DeciderCore:
    core = DeciderCore()
    core.on_policy("shop/web", policy())
    core.on_workload(state(replicas, at=now - 1))
    core.on_window(window(now, load))
    core.on_window(window(now, load, "panic"))
    return core


def test_no_action_before_workload_state_arrives() -> None:
    core = DeciderCore()
    core.on_policy("shop/web", policy())
    core.on_window(window(100.0, 700.0))
    out = core.decide(WL, 100.0)
    assert out.decision is None
    assert "WorkloadState" in out.note


def test_scale_up_decision_carries_reasons_and_seq() -> None:
    now = 1000.0
    core = core_with(load=700.0, replicas=2, now=now)  # 700 rps / 70 per pod -> 10
    out = core.decide(WL, now)
    d = out.decision
    assert d is not None
    assert d.seq == 1
    assert d.from_replicas == 2
    assert 2 < d.to_replicas <= 40
    assert d.reasons
    assert d.policy == "shop/web"
    assert out.checkpoint is not None
    assert out.checkpoint.seq == 1


def test_in_flight_decision_is_not_repeated_and_retried_after_grace() -> None:
    now = 1000.0
    core = core_with(load=700.0, replicas=2, now=now)
    first = core.decide(WL, now).decision
    assert first is not None
    # The target has not caught up yet: the same desire is not published again.
    assert core.decide(WL, now + 1).decision is None
    # Past the grace period the request is sent again, with a newer seq.
    core.on_window(window(now + 61, 700.0))
    core.on_window(window(now + 61, 700.0, "panic"))
    again = core.decide(WL, now + 61).decision
    assert again is not None
    assert again.seq > first.seq


def test_checkpoint_restores_seq_so_it_stays_monotonic() -> None:
    now = 1000.0
    core = core_with(load=700.0, replicas=2, now=now)
    cp = core.decide(WL, now).checkpoint
    assert cp is not None
    restarted = core_with(load=2000.0, replicas=2, now=now + 20)
    restarted.on_checkpoint(msgspec.json.decode(msgspec.json.encode(cp), type=type(cp)))
    d = restarted.decide(WL, now + 20).decision  # past the 15 s rate-limit period
    assert d is not None
    assert d.seq == cp.seq + 1


def test_older_input_than_last_decision_is_not_decided_on() -> None:
    now = 1000.0
    core = core_with(load=700.0, replicas=2, now=now)
    assert core.decide(WL, now).decision is not None
    # A later restart sees only an older window (e.g. replayed): it must not decide on it.
    cp = core.decide(WL, now + 1).checkpoint or core._checkpoint(WL, core.memory[WL], now + 1)
    fresh = DeciderCore()
    fresh.on_checkpoint(cp)
    fresh.on_policy("shop/web", policy())
    fresh.on_workload(state(2, at=now))
    fresh.on_window(window(now - 300, 100.0))
    out = fresh.decide(WL, now + 120)
    assert out.decision is None or out.decision.newest_input >= cp.last_newest_input


def test_policy_tombstone_stops_decisions() -> None:
    now = 1000.0
    core = core_with(load=700.0, replicas=2, now=now)
    core.on_policy("shop/web", None)
    assert core.decide(WL, now).note == "no policy"


def kafka_policy(allow_idle: bool = False) -> ScalingPolicy:
    from governor.spec import policy_from_obj

    return policy_from_obj(
        {
            "apiVersion": "governor.dev/v1alpha1",
            "kind": "ScalingPolicy",
            "metadata": {"name": "consumer", "namespace": "shop"},
            "spec": {
                "targetRef": {"kind": "Deployment", "name": "web"},
                "maxReplicas": 50,
                "metrics": [
                    {
                        "name": "lag",
                        "source": {
                            "type": "kafka_lag",
                            "topic": "orders",
                            "consumerGroup": "g",
                            "allowIdleConsumers": allow_idle,
                        },
                        "target": {"type": "AverageValue", "averageValue": 10},
                    }
                ],
                "behavior": {
                    "scaleUp": {"policies": [{"type": "Pods", "value": 100, "periodSeconds": 15}]}
                },
            },
        }
    )


def lag_window(metric: str, value: float, end: float) -> LoadWindow:
    return LoadWindow(
        workload=WL, metric=metric, window="stable", start=end - 60, end=end, count=5,
        mean=value, max=value, p95=value, newest_sample=end - 1,
    )  # fmt: skip


def test_kafka_lag_consumer_is_capped_at_the_partition_count() -> None:
    now = 1000.0
    for allow_idle, want in ((False, 6), (True, 40)):
        core = DeciderCore()
        core.on_policy("shop/consumer", kafka_policy(allow_idle))
        core.on_workload(state(1, at=now - 1))
        core.on_window(lag_window("lag", 400.0, now))  # 400 / 10 -> 40 replicas
        core.on_window(lag_window("lag.partitions", 6.0, now))
        d = core.decide(WL, now).decision
        assert d is not None
        assert d.to_replicas == want, allow_idle
        if not allow_idle:
            assert any(r.rule == "cap" for r in d.reasons)
