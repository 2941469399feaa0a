"""`compile_policy`'s memo: policies equal but for their target share one compilation; any other
difference compiles apart; compiling never reads the target (what makes the sharing correct)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from governor.policy.evaluation import compile_policy
from governor.spec import (
    ForecastSpec,
    MetricSpec,
    MetricTarget,
    ScalingPolicySpec,
    TargetRef,
)


def _policy(
    name: str, max_replicas: int, target: float, quantile: float | None
) -> ScalingPolicySpec:
    return ScalingPolicySpec(
        target_ref=TargetRef(kind="Deployment", name=name),
        max_replicas=max_replicas,
        metrics=[
            MetricSpec(name="load", target=MetricTarget(type="AverageValue", average_value=target))
        ],
        forecast=None if quantile is None else ForecastSpec(quantile=quantile),
    )


_FIELDS = st.tuples(
    st.sampled_from([5, 10]), st.sampled_from([1.0, 2.5]), st.sampled_from([None, 0.8, 0.9])
)


@given(st.sampled_from(["a", "b", "c"]), _FIELDS, st.sampled_from(["a", "b", "c"]), _FIELDS)
def test_shared_exactly_when_equal_but_for_the_target(
    name1: str, f1: tuple[Any, ...], name2: str, f2: tuple[Any, ...]
) -> None:
    a, b = _policy(name1, *f1), _policy(name2, *f2)
    ca, cb = compile_policy(a), compile_policy(b)
    assert (ca is cb) == (f1 == f2)
    for c, (max_replicas, target, quantile) in ((ca, f1), (cb, f2)):
        assert c.hi == max_replicas
        assert c.metrics[0].target == target
        assert (c.forecast is None) == (quantile is None)
        assert c.forecast is None or c.forecast.quantile == quantile


class _Tripwire:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"compiling read the target's {name}")


def test_compiling_never_reads_the_target() -> None:
    # A content never compiled before (maxReplicas 977), so this compiles rather than shares.
    policy = _policy("w", 977, 3.0, 0.85)
    policy.target_ref = _Tripwire()  # type: ignore[assignment]
    assert compile_policy(policy).hi == 977
