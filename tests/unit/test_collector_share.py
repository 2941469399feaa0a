"""Several collectors split the pull sources; push sources run in every one (issue 19)."""

from __future__ import annotations

from functools import partial

from hypothesis import given
from hypothesis import strategies as st

from governor.spec import PrometheusSource, PushSource, TargetRef
from governor_collector.scheduler import WantedSource, owned, owns_all
from governor_collector.share import in_share
from governor_collector.sources import SourceTarget


def wanted(keys: list[tuple[str, str]], pull: bool) -> dict[tuple[str, str], WantedSource]:
    config = PrometheusSource(query="up") if pull else PushSource()
    return {
        k: WantedSource(
            SourceTarget(
                workload=k[0],
                metric=k[1],
                namespace="ns",
                target_ref=TargetRef(kind="Deployment", name="w"),
            ),
            config,
        )
        for k in keys
    }


keys = st.lists(
    st.tuples(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=8)),
    max_size=30,
    unique=True,
)


@given(keys, st.sets(st.integers(min_value=0, max_value=11)))
def test_two_collectors_run_each_pull_source_once_and_every_push_source(
    ks: list[tuple[str, str]], mine: set[int]
) -> None:
    pull, push = wanted(ks, pull=True), wanted(ks, pull=False)
    a = partial(in_share, partitions=12, mine=frozenset(mine))
    b = partial(in_share, partitions=12, mine=frozenset(set(range(12)) - mine))
    ran_a, ran_b = owned(pull, a), owned(pull, b)
    assert set(ran_a).isdisjoint(ran_b)
    assert set(ran_a) | set(ran_b) == set(pull)
    assert owned(push, a) == push == owned(push, b)


def test_alone_or_before_an_assignment_a_collector_runs_everything() -> None:
    pull = wanted([("ns/Deployment/w", "rps")], pull=True)
    assert owned(pull, owns_all) == pull
    assert owned(pull, partial(in_share, partitions=12, mine=frozenset())) == {}
