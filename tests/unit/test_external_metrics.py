"""external.metrics.k8s.io answers from load windows: naming, selection, delay."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor import external_metrics as em
from governor.events import LoadWindow

SELECTOR = "governor.dev/kind=Deployment,governor.dev/name=web,window=stable"


def window(mean: float, end: float = 100.0, kind: str = "stable") -> LoadWindow:
    return LoadWindow(workload="shop/Deployment/web", metric="rps", window=kind,  # type: ignore[arg-type]
                      start=end - 60, end=end, count=10, mean=mean, max=mean, p95=mean,
                      newest_sample=end)  # fmt: skip


def test_the_selector_names_the_workload_with_the_requests_namespace() -> None:
    q = em.query_for("shop", "rps", SELECTOR)
    assert q == em.Query(workload="shop/Deployment/web", metric="rps", window="stable")
    # matchExpressions with one value, as `In`, and the default window
    q2 = em.query_for("shop", "rps", "governor.dev/kind in (Deployment),governor.dev/name=web")
    assert (q2.workload, q2.window) == ("shop/Deployment/web", "stable")
    q3 = em.query_for("shop", "rps", SELECTOR + ",governor.dev/delay-seconds=30")
    assert q3.delay_seconds == 30.0


@pytest.mark.parametrize(
    ("selector", "says"),
    [
        ("governor.dev/name=web", "must name the workload"),
        (SELECTOR.replace("stable", "hourly"), "must be one of"),
        (SELECTOR + ",governor.dev/delay-seconds=-1", "must be ≥ 0"),
        (SELECTOR + ",governor.dev/delay-seconds=soon", "not a number"),
        ("governor.dev/kind!=Deployment,governor.dev/name=web", "only equality"),
        ("governor.dev/kind in (A,B),governor.dev/name=web", "only one value"),
        (SELECTOR + ",governor.dev/statistic=sum", "must be one of mean, total"),
    ],
)
def test_a_selector_it_cannot_answer_says_why(selector: str, says: str) -> None:
    with pytest.raises(em.SelectorError, match=says):
        em.query_for("shop", "rps", selector)


def test_a_delay_serves_what_was_held_that_long_ago() -> None:
    h = em.WindowHistory(keep_seconds=120)
    h.add(window(10), seen_at=1000)
    h.add(window(20), seen_at=1010)
    h.add(window(30), seen_at=1020)
    q = em.query_for("shop", "rps", SELECTOR)
    assert h.answer(q, now=1025, default_delay=0).mean == 30  # type: ignore[union-attr]
    assert h.answer(q, now=1025, default_delay=10).mean == 20  # type: ignore[union-attr]
    per_metric = em.query_for("shop", "RPS", SELECTOR + ",governor.dev/delay-seconds=20")
    assert h.answer(per_metric, now=1025, default_delay=0).mean == 10  # type: ignore[union-attr]
    assert h.answer(q, now=1025, default_delay=60) is None  # nothing had arrived by then
    panic = em.query_for("shop", "rps", SELECTOR.replace("stable", "panic"))
    assert h.answer(panic, now=1025, default_delay=0) is None


def test_old_windows_expire_but_the_newest_before_the_horizon_stays() -> None:
    h = em.WindowHistory(keep_seconds=30)
    for t in range(0, 100, 10):
        h.add(window(float(t)), seen_at=float(t))
    assert len(h) == 4  # 60, 70, 80, 90: 60 is what a 30 s delay at 90 still sees
    key = ("shop/Deployment/web", "rps", "stable")
    assert h.at(key, 90 - 30).mean == 60  # type: ignore[union-attr]


@given(
    gaps=st.lists(st.floats(0, 50), min_size=1, max_size=30),
    delay=st.floats(0, 200),
    after=st.floats(0, 100),
)
def test_the_answer_is_the_newest_window_seen_by_now_minus_delay(
    gaps: list[float], delay: float, after: float
) -> None:
    h = em.WindowHistory(keep_seconds=1000)
    t, seen = 0.0, []
    for i, gap in enumerate(gaps):
        t += gap
        h.add(window(float(i)), seen_at=t)
        seen.append(t)
    now = t + after
    got = h.answer(em.query_for("shop", "rps", SELECTOR), now, delay)
    eligible = [i for i, s in enumerate(seen) if s <= now - delay]
    assert (got.mean if got else None) == (float(eligible[-1]) if eligible else None)


def test_the_value_list_is_what_the_hpa_reads() -> None:
    q = em.query_for("shop", "rps", SELECTOR)
    body = msgspec.json.decode(em.value_list(q, em.parse_selector(SELECTOR), [window(12.3456)]))
    assert body["kind"] == "ExternalMetricValueList"
    assert body["apiVersion"] == "external.metrics.k8s.io/v1beta1"
    (item,) = body["items"]
    assert item["metricName"] == "rps"
    assert item["value"] == "12346m"  # milli-units: the HPA compares MilliValue()
    assert item["timestamp"] == "1970-01-01T00:01:40Z"
    assert item["metricLabels"]["governor.dev/name"] == "web"
    assert msgspec.json.decode(em.value_list(q, {}, []))["items"] == []


def test_a_total_query_serves_a_per_pod_series_per_instant_total() -> None:
    q = em.query_for("shop", "rps", SELECTOR + ",governor.dev/statistic=total")
    assert q.statistic == "total" and em.query_for("shop", "rps", SELECTOR).statistic == "mean"
    per_pod = msgspec.structs.replace(window(10.0), instants=20, total_mean=200.0)
    assert em.served(q, per_pod) == 200.0
    assert em.served(em.query_for("shop", "rps", SELECTOR), per_pod) == 10.0
    assert em.served(q, window(10.0)) == 10.0  # not per-pod: the series is its own total
    (item,) = msgspec.json.decode(em.value_list(q, {}, [per_pod]))["items"]
    assert item["value"] == "200000m"


def test_discovery_lists_each_metric_once() -> None:
    body = msgspec.json.decode(em.discovery(["rps", "lag", "rps"]))
    assert [r["name"] for r in body["resources"]] == ["lag", "rps"]
    assert all(r["namespaced"] and r["verbs"] == ["get"] for r in body["resources"])
