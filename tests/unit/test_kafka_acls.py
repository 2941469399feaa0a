"""The ACLs generated from the topic table: least privilege, and nothing left out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor import events
from governor.events import PRINCIPALS, TOPICS, Access, access_table
from governor.kafka_acls import Binding, allowed, bindings, bindings_for, read_librdkafka_conf

REPO = Path(__file__).resolve().parents[2]
SERVICES = [p for p in PRINCIPALS if p not in ("admin", "viewer", "metrics-producer")]


def test_kafka_sh_makes_a_user_for_every_principal() -> None:
    text = (REPO / "deploy" / "kafka" / "kafka.sh").read_text()
    m = re.search(r'^PRINCIPALS="([^"]+)"', text, re.M)
    assert m, "kafka.sh has no PRINCIPALS= line"
    assert tuple(m.group(1).split()) == PRINCIPALS


def test_every_topic_has_a_writer_and_a_reader_and_its_dlq_a_row() -> None:
    rows = {r.name: r for r in access_table()}
    for t in TOPICS:
        assert t.writers, f"{t.name}: nobody may write it"
        assert t.readers, f"{t.name}: nobody may read it"
        assert t.dlq in rows, f"{t.dlq}: no access row"
        assert set(rows[t.dlq].writers) == set(t.readers) - {"viewer"}


def test_no_service_may_create_a_contract_topic() -> None:
    created = {b.resource for b in bindings() if b.operation == "CREATE"}
    assert created == {row.name for row in events.FAUST_TOPICS}
    assert all(b.principal == "aggregator" for b in bindings() if b.operation == "CREATE")


def test_viewer_only_reads_and_metrics_producer_only_writes_metrics() -> None:
    assert {b.operation for b in bindings() if b.principal == "viewer"} == {"READ"}
    mp = [b for b in bindings() if b.principal == "metrics-producer"]
    assert mp == [Binding("metrics-producer", "topic", events.METRICS.name, False, "WRITE")]


def test_only_the_decider_writes_decisions() -> None:
    writers = {b.principal for b in bindings() if b.resource == events.DECISIONS.name}
    assert {
        b.principal
        for b in bindings()
        if b.resource == events.DECISIONS.name and b.operation == "WRITE"
    } == {"decider"}
    assert writers == {"decider", "actuator", "viewer"}


def test_admin_is_the_super_user_and_needs_no_acl() -> None:
    assert not [b for b in bindings() if b.principal == "admin"]
    assert allowed([], "admin", "topic", "anything", "WRITE")


def test_every_service_has_rights_and_its_group() -> None:
    for p in SERVICES:
        assert any(b.principal == p for b in bindings()), p
    groups = {(b.principal, b.resource) for b in bindings() if b.resource_type == "group"}
    assert groups == {
        ("aggregator", "governor-aggregator"),
        ("decider", "governor-decider"),
        ("actuator", "governor-actuator"),
        ("collector", "governor-collector"),  # the pull sources' split (governor.collector-sources)
    }


def test_an_unknown_principal_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown principals"):
        bindings([Access("t", writers=("nobody",))])  # type: ignore[arg-type]


def test_faust_topic_names_are_the_aggregators() -> None:
    from governor_aggregator.main import AggregatorSettings, build_app

    app = build_app(AggregatorSettings())
    names = {t.get_topic_name() for t in (app.tables[events.AGGREGATOR_TABLE].changelog_topic,)}
    names.add(f"{app.conf.id}-__assignor-__leader")
    assert names == {row.name for row in events.FAUST_TOPICS}


principal = st.sampled_from(PRINCIPALS)
names = st.sampled_from([r.name for r in access_table()] + ["other.topic", "governor.x"])


@given(
    principal,
    names,
    st.sampled_from(["READ", "WRITE", "CREATE"]),
    st.lists(st.sampled_from(PRINCIPALS), max_size=3),
)
def test_allowed_is_exactly_the_rows(p: str, name: str, op: str, readers: list[str]) -> None:
    row = Access(name, readers=tuple(readers))  # type: ignore[arg-type]
    found = bindings_for(row)
    want = p == "admin" or (op == "READ" and p in readers)
    assert allowed(found, p, "topic", name, op) == want  # type: ignore[arg-type]


@given(principal, st.text(min_size=1, max_size=20), st.text(max_size=10))
def test_prefixed_rows_cover_their_prefix_only(p: str, prefix: str, rest: str) -> None:
    found = bindings_for(Access(prefix, writers=(p,), prefixed=True))
    assert allowed(found, p, "topic", prefix + rest, "WRITE")
    assert not allowed(found, p, "topic", prefix + rest, "READ") or p == "admin"
    assert not allowed(found, p, "group", prefix + rest, "WRITE") or p == "admin"


def test_read_librdkafka_conf(tmp_path: Path) -> None:
    f = tmp_path / "c.conf"
    f.write_text("# comment\n\nbootstrap.servers=127.0.0.1:1\nsasl.password=a=b\n")
    assert read_librdkafka_conf(f) == {"bootstrap.servers": "127.0.0.1:1", "sasl.password": "a=b"}
    f.write_text("not a pair\n")
    with pytest.raises(ValueError, match="not a key=value line"):
        read_librdkafka_conf(f)


def test_the_decider_alone_writes_and_reads_recommendations_in_its_group() -> None:
    """Stage 1 writes governor.recommendations, stage 2 (any decider of the group) reads it."""
    name = events.RECOMMENDATIONS.name
    found = bindings()
    assert {b.principal for b in found if b.resource == name and b.operation == "WRITE"} == {
        "decider"
    }
    readers = {b.principal for b in found if b.resource == name and b.operation == "READ"}
    assert readers == {"decider", "viewer"}
    assert allowed(found, "decider", "group", "governor-decider", "READ")
    assert not allowed(found, "actuator", "topic", name, "READ")
