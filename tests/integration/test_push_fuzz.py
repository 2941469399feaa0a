"""Fuzzing the push endpoint on the real broker: schemathesis from the served /openapi.json
(valid and schema-violating batches), then hypothesis with what a schema cannot produce
(random bytes, truncated JSON, NaN/Infinity literals, huge numbers, unicode, oversized bodies).

0 server errors (5xx) in all of it, every answer conforms to the document, and what was
refused wrote nothing: the topic holds exactly the samples of the accepted batches.
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import requests
import schemathesis
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from governor.events import MetricBatch, MetricSample
from governor.metric_records import decode_record
from governor.settings import KafkaSettings
from governor_collector.config import CollectorSettings
from governor_collector.main import Collector
from tests.integration.test_collector import make_topics
from tests.support.topics import fresh_suffix

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(600),
    # schemathesis's own generation draws from the global `random` (schemathesis.generation.
    # dictionaries), which Hypothesis flags on every case (~150 warnings a run), ours or not.
    pytest.mark.filterwarnings(
        "ignore:Do not use the `random` module inside strategies"
        ":hypothesis.errors.HypothesisDeprecationWarning"
    ),
]

# per generation mode (valid, invalid): 1,000 requests; ~35 ms each to generate
SCHEMA_EXAMPLES = 500
RAW_EXAMPLES = 700
MAX_BODY = 64 * 1024


@dataclass
class Running:
    url: str
    metrics_topic: str
    stop: threading.Event = field(default_factory=threading.Event)


@pytest.fixture(scope="module")
def collector(kafka_bootstrap: str) -> Iterator[Running]:
    """The collector in a thread of its own (its own event loop), so the synchronous fuzzers
    can call it; on the real broker, with its own topics."""
    suffix = fresh_suffix()
    s = CollectorSettings(
        kafka=KafkaSettings(bootstrap=kafka_bootstrap, client_id=f"test-fuzz-{suffix}"),
        http_host="127.0.0.1",
        http_port=0,
        metrics_topic=f"test.fuzz.metrics.{suffix}",
        policies_topic=f"test.fuzz.policies.{suffix}",
        push_max_body_bytes=MAX_BODY,
        start_timeout_seconds=30,
    )
    asyncio.run(make_topics(kafka_bootstrap, s.metrics_topic, s.policies_topic))
    started = threading.Event()
    ports: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    async def serve() -> None:
        c = Collector(s)
        await c.start()
        ports.append(c.port)
        started.set()
        await asyncio.to_thread(done.wait)
        await c.stop()

    def main() -> None:
        try:
            asyncio.run(serve())
        except BaseException as e:  # reported by the fixture
            errors.append(e)
            started.set()

    t = threading.Thread(target=main, name="collector", daemon=True)
    t.start()
    assert started.wait(60), "the collector did not start"
    assert not errors, errors
    try:
        yield Running(f"http://127.0.0.1:{ports[0]}", s.metrics_topic, done)
    finally:
        done.set()
        t.join(30)
        assert not errors, f"the collector crashed: {errors}"


def topic_samples(bootstrap: str, topic: str) -> list[MetricSample]:
    """Every sample on the topic now (librdkafka's consumer: synchronous, like the fuzzers)."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: list[MetricSample] = []
        seen = dict.fromkeys(parts, 0)
        while any(seen[p] < end for p, end in ends.items()):
            msg = c.poll(1.0)
            if msg is None or msg.error() is not None:
                continue
            # The collector writes MetricBatch records: every sample of each.
            rec = decode_record(msg.value() or b"")
            out += rec.samples if isinstance(rec, MetricBatch) else [rec]
            seen[msg.partition()] = msg.offset() + 1
        return out
    finally:
        c.close()


def test_schemathesis_fuzz_of_the_push_api(collector: Running, kafka_bootstrap: str) -> None:
    schema = schemathesis.openapi.from_url(f"{collector.url}/openapi.json")
    op = schema["/v1/samples"]["POST"]
    statuses: collections.Counter[int] = collections.Counter()
    accepted = 0
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
        negative_data_rejection,
    ]
    session = requests.Session()
    for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

        @settings(
            max_examples=SCHEMA_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy(mode))
        def fuzz(case: schemathesis.Case) -> None:
            nonlocal accepted
            r = case.call_and_validate(base_url=collector.url, session=session, checks=checks)
            statuses[r.status_code] += 1
            if r.status_code == 200:
                accepted += r.json()["accepted"]

        fuzz()
    total = sum(statuses.values())
    print(f"schemathesis: {total} requests, statuses {dict(sorted(statuses.items()))}")
    assert total >= 2 * SCHEMA_EXAMPLES * 0.9  # hypothesis may stop early on a tiny space
    assert not [s for s in statuses if s >= 500]
    assert statuses[200] > 0 and statuses[400] > 0
    assert len(topic_samples(kafka_bootstrap, collector.metrics_topic)) == accepted


# --- what a schema cannot generate -------------------------------------------------------------

workload = st.from_regex(r"\A[a-z0-9-]{1,8}/[A-Za-z]{1,8}/[a-z0-9-]{1,8}\Z")
good_sample = st.fixed_dictionaries(
    {
        "workload": workload,
        "metric": st.text(min_size=1, max_size=8),
        "value": st.floats(allow_nan=False, allow_infinity=False),
        "timestamp": st.floats(min_value=1.0, max_value=4e9),
    }
)


def _encode(batch: object) -> bytes:
    return json.dumps(batch, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogatepass")


bad_value = st.one_of(
    st.just(float("nan")),
    st.just(float("inf")),
    st.just(float("-inf")),
    st.integers(min_value=10**300, max_value=10**400),
    st.text(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
bodies = st.one_of(
    st.binary(max_size=2048),  # random bytes
    st.builds(
        lambda b, n: _encode(b)[:n],
        st.lists(good_sample, max_size=3).map(lambda s: {"samples": s}),
        st.integers(0, 200),
    ),  # truncated JSON
    st.builds(  # one invalid sample among valid ones
        lambda s, i, v, k: _encode(
            {"samples": [*s[:i], {**s[i % len(s)], k: v}, *s[i:]]} if s else {"samples": [v]}
        ),
        st.lists(good_sample, min_size=1, max_size=4),
        st.integers(0, 3),
        bad_value,
        st.sampled_from(["value", "timestamp", "workload", "metric", "labels"]),
    ),
    st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),  # unicode, not JSON
    st.integers(MAX_BODY + 1, 4 * MAX_BODY).map(lambda n: b'{"samples": [' + b" " * n + b"]}"),
)


def test_raw_body_fuzz_of_the_push_api(collector: Running, kafka_bootstrap: str) -> None:
    before = len(topic_samples(kafka_bootstrap, collector.metrics_topic))
    statuses: collections.Counter[int] = collections.Counter()
    session = requests.Session()
    accepted = 0

    @settings(
        max_examples=RAW_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(body=bodies)
    def fuzz(body: bytes) -> None:
        nonlocal accepted
        r = session.post(
            f"{collector.url}/v1/samples",
            data=body,
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        statuses[r.status_code] += 1
        assert r.status_code in (200, 400, 413), (r.status_code, r.text, body[:200])
        assert r.headers["Content-Type"].startswith("application/json")
        doc = r.json()
        if r.status_code == 200:
            accepted += doc["accepted"]
        else:
            assert doc["error"] in ("malformed_json", "invalid_batch", "too_large"), doc
            if doc["error"] == "invalid_batch":
                assert doc["path"].startswith("$"), doc

    fuzz()
    total = sum(statuses.values())
    print(f"raw fuzz: {total} requests, statuses {dict(sorted(statuses.items()))}")
    assert total >= RAW_EXAMPLES * 0.9 and not [s for s in statuses if s >= 500]
    assert statuses[400] > 0 and statuses[413] > 0
    after = topic_samples(kafka_bootstrap, collector.metrics_topic)
    assert len(after) - before == accepted


def test_one_invalid_sample_rejects_the_batch_whole(
    collector: Running, kafka_bootstrap: str
) -> None:
    before = len(topic_samples(kafka_bootstrap, collector.metrics_topic))
    w = f"fuzz/Deployment/one-bad-{uuid.uuid4().hex[:6]}"
    samples = [
        {"workload": w, "metric": "rps", "value": float(i), "timestamp": 1.7e9 + i}
        for i in range(5)
    ]
    samples[3]["value"] = "NaN"
    r = requests.post(f"{collector.url}/v1/samples", json={"samples": samples}, timeout=30)
    assert r.status_code == 400
    assert (r.json()["path"], r.json()["index"]) == ("$.samples[3].value", 3)
    huge = [samples[0], {**samples[1], "value": 1e300}, {**samples[2], "timestamp": -1.0}]
    body = _encode({"samples": huge}).replace(b"1e+300", b"1e400")
    r = requests.post(f"{collector.url}/v1/samples", data=body, timeout=30)
    assert (r.status_code, r.json()["index"]) == (400, 1), r.text
    # a NaN literal is not JSON at all: rejected as such (no sample index to give)
    body = _encode({"samples": [samples[0], {**samples[1], "value": float("nan")}]})
    r = requests.post(f"{collector.url}/v1/samples", data=body, timeout=30)
    assert (r.status_code, r.json()["error"]) == (400, "malformed_json"), r.text
    assert len(topic_samples(kafka_bootstrap, collector.metrics_topic)) == before
