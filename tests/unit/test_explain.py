"""governor.explain: which decisions are shown, matched with which actuation, recommendation and
Events, and what the text says."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from governor.explain import PENDING, ClusterEvent, Explanation, explain, render
from tests.support.explain import WL, actuation, decision, recommendation


def test_last_n_of_this_workload_oldest_first_with_their_outcomes() -> None:
    ds = [decision(s) for s in (3, 1, 2, 4)] + [decision(9, workload="shop/Deployment/other")]
    acts = [
        actuation(ds[1], "failed", "api_error", 2000),  # seq 1: failed, then applied
        actuation(ds[1], "applied", "applied", 2001),
        actuation(ds[0], "refused", "paused", 2002),  # seq 3
    ]
    x = explain(WL, ds, acts, last=3)
    assert [e.seq for e in x.decisions] == [2, 3, 4]
    assert [e.outcome for e in x.decisions] == [PENDING, "refused", PENDING]
    assert x.decisions[1].outcome_reason == "paused"
    assert explain(WL, ds, acts, last=10).decisions[0].outcome == "applied"


def test_bound_by_is_the_last_rule_and_stage1_the_newest_recommendation_before_it() -> None:
    d = decision(1)
    recs = [recommendation(990, ready=0), recommendation(1000.5, ready=1), recommendation(1500, 3)]
    (e,) = explain(WL, [d], [], recs).decisions
    assert e.bound_by == "rate_limit"
    assert e.stage1 is not None and e.stage1.ready == 1


def test_events_go_to_the_decision_they_name_annotations_only_governors() -> None:
    d = decision(7)
    mine = ClusterEvent(
        at="2026-12-01T20:00:00Z",
        type="Normal",
        reason="GovernorScaled",
        message=f"scaled 1->5 (seq 7, {d.decision_id}): applied",
    )
    other = ClusterEvent(at="2026-12-01T19:00:00Z", type="Normal", reason="X", message="y")
    x = explain(
        WL,
        [d],
        annotations={"governor.dev/decision-seq": "7", "deployment.kubernetes.io/revision": "1"},
        events=[other, mine],
    )
    assert x.decisions[0].events == [mine]
    assert x.other_events == [other]
    assert x.annotations == {"governor.dev/decision-seq": "7"}
    # an Event about a decision older than the ones shown goes with it
    older = decision(6)
    about_older = ClusterEvent(
        at="2026-12-01T19:59:00Z", type="Normal", reason="GovernorScaled", message=older.decision_id
    )
    x = explain(WL, [older, d], events=[other, about_older, mine], last=1)
    assert [e.seq for e in x.decisions] == [7]
    assert x.other_events == [other]


def test_text_names_time_from_to_rule_inputs_outcome() -> None:
    d = decision(1)
    x = explain(WL, [d], [actuation(d, "applied", "applied", 1002)], [recommendation(1000, 1)])
    text = render(x)
    assert "1970-01-01 00:16:41.000Z  seq 1  1 -> 5  applied\n" in text
    assert "bound by: rate_limit" in text
    assert "rule:     metric rps=4.2: ceil(1 x 42 / 10) = 5" in text
    assert "input:    rps=42 (target 10 AverageValue)" in text
    assert "workload: ready 1/1, wanted 5, floor 1, bounds [1, 20], pool default" in text
    assert render(explain(WL, [])).endswith("(is there a ScalingPolicy for it?)")


@given(
    seqs=st.lists(st.integers(0, 50), max_size=30),
    last=st.integers(1, 12),
    acted=st.sets(st.integers(0, 50)),
)
def test_properties_shown_are_the_newest_unique_sorted_and_json_round_trips(
    seqs: list[int], last: int, acted: set[int]
) -> None:
    ds = [decision(s) for s in seqs]
    acts = [actuation(d, "applied", "applied", 3000.0 + d.seq) for d in ds if d.seq in acted]
    x = explain(WL, ds, acts, last=last)
    shown = [e.seq for e in x.decisions]
    assert shown == sorted(set(seqs))[-last:]
    assert all((e.outcome == "applied") == (e.seq in acted) for e in x.decisions)
    assert msgspec.json.decode(msgspec.json.encode(x), type=Explanation) == x
