"""KEDA's Kafka-lag arithmetic (governor.policy.kafka_lag)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.policy.kafka_lag import (
    LagSettings,
    PartitionOffsets,
    compute_lag,
    partition_lag,
)


def parts(*pairs: tuple[int, int | None]) -> list[PartitionOffsets]:
    return [PartitionOffsets(i, latest, committed) for i, (latest, committed) in enumerate(pairs)]


# --- per partition ------------------------------------------------------------------------------


def test_lag_is_latest_minus_committed() -> None:
    assert partition_lag(100, 40, "latest") == 60
    assert partition_lag(100, 100, "latest") == 0


def test_no_commit_latest_policy_counts_one() -> None:
    assert partition_lag(100, None, "latest") == 1
    assert partition_lag(0, None, "latest") == 1


def test_no_commit_earliest_policy_counts_the_whole_partition() -> None:
    assert partition_lag(100, None, "earliest") == 100
    assert partition_lag(0, None, "earliest") == 0


def test_committed_beyond_end_is_not_negative() -> None:
    assert partition_lag(10, 12, "latest") == 0


# --- totals and caps ----------------------------------------------------------------------------


def test_total_is_the_sum_when_below_the_cap() -> None:
    report, _ = compute_lag(parts((10, 5), (10, 7), (10, 10)), LagSettings(lag_threshold=10))
    assert report.total_lag == 8
    assert report.partitions == 3
    assert report.partitions_with_lag == 2
    assert report.upper_bound == 3
    assert report.desired_replicas(10) == 1


def test_capped_at_partitions_times_threshold() -> None:
    report, _ = compute_lag(parts((1000, 0), (1000, 0)), LagSettings(lag_threshold=10))
    assert report.total_lag == 20  # 2 partitions x 10
    assert report.total_lag_with_persistent == 2000
    assert report.desired_replicas(10) == 2


def test_cap_is_exact_where_keda_integer_division_leaks() -> None:
    # KEDA: 25/10 = 2, not > 2 partitions, so it keeps 25 and asks for 3 replicas; we cap at 20.
    report, _ = compute_lag(parts((20, 0), (5, 0)), LagSettings(lag_threshold=10))
    assert report.total_lag == 20
    assert report.desired_replicas(10) == 2


def test_allow_idle_consumers_lifts_the_cap() -> None:
    s = LagSettings(lag_threshold=10, allow_idle_consumers=True)
    report, _ = compute_lag(parts((1000, 0), (1000, 0)), s)
    assert report.total_lag == 2000
    assert report.upper_bound is None


def test_limit_to_partitions_with_lag() -> None:
    s = LagSettings(lag_threshold=10, limit_to_partitions_with_lag=True)
    report, _ = compute_lag(parts((1000, 0), (5, 5), (5, 5), (5, 5)), s)
    assert report.partitions_with_lag == 1
    assert report.upper_bound == 1
    assert report.total_lag == 10


def test_limit_to_partitions_with_lag_falls_back_to_partitions_when_none_has_lag() -> None:
    s = LagSettings(lag_threshold=10, limit_to_partitions_with_lag=True)
    report, _ = compute_lag(parts((5, 5), (5, 5)), s)
    assert report.upper_bound == 2
    assert report.total_lag == 0


def test_incompatible_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot both be set"):
        LagSettings(allow_idle_consumers=True, limit_to_partitions_with_lag=True)
    with pytest.raises(ValueError, match="lag_threshold"):
        LagSettings(lag_threshold=0)


# --- activation -----------------------------------------------------------------------------------


def test_activation_is_strictly_greater() -> None:
    s = LagSettings(activation_lag_threshold=5)
    assert not compute_lag(parts((5, 0)), s)[0].active
    assert compute_lag(parts((6, 0)), s)[0].active


def test_default_activation_means_any_lag() -> None:
    assert not compute_lag(parts((5, 5)), LagSettings())[0].active
    assert compute_lag(parts((5, 4)), LagSettings())[0].active


# --- persistent lag -------------------------------------------------------------------------------


def test_persistent_lag_excluded_from_scaling_but_not_activation() -> None:
    s = LagSettings(lag_threshold=10, exclude_persistent_lag=True)
    first, prev = compute_lag(parts((100, 50), (100, 10)), s)
    assert first.total_lag == 20  # first poll: no history, counts (capped at 2 x 10)
    assert prev == {0: 50, 1: 10}
    # partition 0 stuck at 50, partition 1 moved to 95
    second, prev = compute_lag(parts((100, 50), (100, 95)), s, prev)
    assert [p.lag for p in second.per_partition] == [0, 5]
    assert second.total_lag == 5
    assert second.total_lag_with_persistent == 55
    assert second.active
    assert prev == {0: 50, 1: 95}


def test_persistent_lag_state_is_not_kept_without_the_option() -> None:
    _, prev = compute_lag(parts((100, 50)), LagSettings())
    assert prev == {}


def test_no_commit_is_never_persistent() -> None:
    s = LagSettings(exclude_persistent_lag=True, offset_reset_policy="earliest")
    _, prev = compute_lag(parts((30, None)), s)
    report, _ = compute_lag(parts((30, None)), s, prev)
    assert report.per_partition[0].lag == 30
    assert report.total_lag == 10  # capped at 1 partition x 10


# --- properties -----------------------------------------------------------------------------------

offsets_st = st.lists(
    st.tuples(st.integers(0, 10**9), st.one_of(st.none(), st.integers(0, 10**9))),
    min_size=1,
    max_size=40,
)
settings_st = st.builds(
    LagSettings,
    lag_threshold=st.integers(1, 10_000),
    activation_lag_threshold=st.integers(0, 1000),
    offset_reset_policy=st.sampled_from(["latest", "earliest"]),
    allow_idle_consumers=st.booleans(),
    exclude_persistent_lag=st.booleans(),
    limit_to_partitions_with_lag=st.just(False),
)


@given(offsets_st, settings_st)
def test_lag_never_negative_and_bounded_by_the_uncapped_total(
    pairs: list[tuple[int, int | None]], s: LagSettings
) -> None:
    report, _ = compute_lag(parts(*pairs), s)
    assert 0 <= report.total_lag <= report.total_lag_with_persistent
    assert all(p.lag >= 0 for p in report.per_partition)


@given(offsets_st, settings_st)
def test_desired_never_exceeds_partitions_unless_idle_consumers_allowed(
    pairs: list[tuple[int, int | None]], s: LagSettings
) -> None:
    report, _ = compute_lag(parts(*pairs), s)
    if not s.allow_idle_consumers:
        assert report.desired_replicas(s.lag_threshold) <= report.partitions
    else:
        assert report.total_lag == report.total_lag_with_persistent or s.exclude_persistent_lag


@given(offsets_st, st.integers(1, 1000))
def test_limit_to_partitions_with_lag_bound(
    pairs: list[tuple[int, int | None]], threshold: int
) -> None:
    s = LagSettings(lag_threshold=threshold, limit_to_partitions_with_lag=True)
    report, _ = compute_lag(parts(*pairs), s)
    bound = report.partitions_with_lag or report.partitions
    assert report.desired_replicas(threshold) <= bound


@given(offsets_st, settings_st)
def test_a_repeated_poll_excludes_every_committed_partition(
    pairs: list[tuple[int, int | None]], s: LagSettings
) -> None:
    s = LagSettings(
        lag_threshold=s.lag_threshold,
        offset_reset_policy=s.offset_reset_policy,
        exclude_persistent_lag=True,
    )
    first, prev = compute_lag(parts(*pairs), s)
    second, _ = compute_lag(parts(*pairs), s, prev)
    for p, (latest, committed) in zip(second.per_partition, pairs, strict=True):
        if committed is not None:
            assert p.lag == 0
        else:
            assert p.lag == partition_lag(latest, committed, s.offset_reset_policy)
    # activation still sees the persistent lag
    assert second.total_lag_with_persistent == first.total_lag_with_persistent
    assert second.active == first.active


@given(offsets_st, st.integers(1, 1000))
def test_cap_matches_keda_when_keda_has_no_rounding_leak(
    pairs: list[tuple[int, int | None]], threshold: int
) -> None:
    report, _ = compute_lag(parts(*pairs), LagSettings(lag_threshold=threshold))
    raw = report.total_lag_with_persistent
    keda = raw if raw // threshold <= report.partitions else report.partitions * threshold
    assert report.total_lag <= keda
    assert math.ceil(keda / threshold) - report.desired_replicas(threshold) in (0, 1)
