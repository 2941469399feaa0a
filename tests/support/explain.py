"""The records `governor explain` reads, as its unit and integration tests write them."""

from __future__ import annotations

from governor.events import Actuation, MetricInput, Reason, Recommendation, ScaleDecision

WL = "shop/Deployment/web"


def decision(
    seq: int,
    frm: int = 1,
    to: int = 5,
    workload: str = WL,
    *,
    at: float | None = None,
    desired: int | None = None,
) -> ScaleDecision:
    """Decision `seq` of `workload`, decided at `at` (else 1000 + seq); `desired` is the
    metric's own wish, shown as "wants N" when set."""
    at = 1000.0 + seq if at is None else at
    return ScaleDecision(
        decision_id=f"d-{workload.replace('/', '.')}-{seq}",
        workload=workload,
        seq=seq,
        from_replicas=frm,
        to_replicas=to,
        reasons=[
            Reason(rule="metric", metric="rps", value=4.2, detail="ceil(1 x 42 / 10) = 5"),
            Reason(rule="rate_limit", detail="scaleUp Pods 4 per 15s"),
        ],
        inputs=[
            MetricInput(
                metric="rps", value=42.0, target=10, target_type="AverageValue", desired=desired
            )
        ],
        policy_generation=1,
        newest_input=at,
        decided_at=at,
    )


def actuation(d: ScaleDecision, outcome: str, reason: str, at: float | None = None) -> Actuation:
    """The actuator's outcome of `d`, at `at` (else 0.2 s after the decision)."""
    return Actuation(
        decision_id=d.decision_id,
        workload=d.workload,
        seq=d.seq,
        outcome=outcome,  # type: ignore[arg-type]
        reason=reason,
        from_replicas=d.from_replicas,
        to_replicas=d.to_replicas,
        at=d.decided_at + 0.2 if at is None else at,
    )


def recommendation(at: float, ready: int, workload: str = WL) -> Recommendation:
    return Recommendation(
        workload=workload,
        pool="default",
        desired=5,
        current=1,
        ready=ready,
        min_replicas=1,
        max_replicas=20,
        floor=1,
        priority=0,
        weight=1.0,
        requests={},
        elastic=False,
        reasons=[],
        inputs=[],
        newest_input=at,
        policy_generation=1,
        computed_at=at,
    )
