"""BulkMetric renders what prometheus_client's Gauge/Counter would (`_created` aside), reads
back through the registry, and forgets removed label sets."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from governor.bulk_metrics import BulkMetric, exposition

label = st.text(min_size=0, max_size=12)
value = st.floats(allow_nan=False) | st.sampled_from([math.inf, -math.inf])


def _families(text: bytes) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    out: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text.decode()):
        if family.name.endswith("_created"):
            continue
        samples = [(s.name, s.labels, s.value) for s in family.samples]
        out[family.name] = sorted((s for s in samples if not s[0].endswith("_created")), key=repr)
    return out


@given(st.lists(st.tuples(label, label, value), max_size=20))
def test_a_gauge_renders_what_prometheus_client_renders(
    series: list[tuple[str, str, float]],
) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    bulk = BulkMetric("governor_test_g", 'doc with "quotes"\nand \\', ["a", "b"], registry=ours)
    plain = Gauge("governor_test_g", 'doc with "quotes"\nand \\', ["a", "b"], registry=theirs)
    for a, b, v in series:
        bulk.labels(a, b).set(v)
        plain.labels(a, b).set(v)
    assert _families(exposition(ours)) == _families(generate_latest(theirs))
    for a, b, _ in series:
        assert ours.get_sample_value(
            "governor_test_g", {"a": a, "b": b}
        ) == theirs.get_sample_value("governor_test_g", {"a": a, "b": b})


@given(st.lists(st.tuples(label, st.floats(min_value=0, max_value=1e6)), max_size=20))
def test_a_counter_renders_what_prometheus_client_renders(incs: list[tuple[str, float]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    bulk = BulkMetric("governor_test_c_total", "doc", ["w"], kind="counter", registry=ours)
    plain = Counter("governor_test_c_total", "doc", ["w"], registry=theirs)
    for w, amount in incs:
        bulk.labels(w).inc(amount)
        plain.labels(w).inc(amount)
    assert _families(exposition(ours)) == _families(generate_latest(theirs))
    assert [f.type for f in ours.collect()] == ["counter"]


def test_removed_label_sets_leave_the_scrape_and_other_metrics_stay() -> None:
    reg = CollectorRegistry()
    bulk = BulkMetric("governor_test_g", "doc", ["workload"], registry=reg)
    other = Gauge("governor_test_other", "doc", registry=reg)
    other.set(3)
    bulk.labels("ns/Deployment/a").set(1)
    bulk.labels("ns/Deployment/b").set(2)
    bulk.remove("ns/Deployment/a")
    assert reg.get_sample_value("governor_test_g", {"workload": "ns/Deployment/a"}) is None
    assert reg.get_sample_value("governor_test_g", {"workload": "ns/Deployment/b"}) == 2
    text = exposition(reg).decode()
    assert "ns/Deployment/a" not in text
    assert "governor_test_other 3.0" in text


def test_a_counter_refuses_a_negative_increment_and_labels_must_match() -> None:
    bulk = BulkMetric("governor_test_c", "doc", ["w"], kind="counter", registry=None)
    for bad in (lambda: bulk.labels("x").inc(-1), lambda: bulk.labels("x", "y")):
        try:
            bad()
        except ValueError:
            continue
        raise AssertionError("accepted")


def test_a_label_set_removed_and_set_again_renders_once_with_its_value() -> None:
    reg = CollectorRegistry()
    bulk = BulkMetric("governor_test_g", "doc", ["workload", "kind"], registry=reg)
    bulk.labels('ns/Deployment/"a"', "current").set(1)
    assert 'workload="ns/Deployment/\\"a\\""' in exposition(reg).decode()
    bulk.remove('ns/Deployment/"a"', "current")
    bulk.labels("100%", "current").set(2)  # a "%" in a value is not a format directive
    bulk.labels('ns/Deployment/"a"', "current").set(3)
    text = exposition(reg).decode()
    assert text.count("governor_test_g{") == 2
    assert 'governor_test_g{workload="100%",kind="current"} 2.0' in text
    assert 'governor_test_g{workload="ns/Deployment/\\"a\\"",kind="current"} 3.0' in text
