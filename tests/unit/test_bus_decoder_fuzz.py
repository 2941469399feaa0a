"""Every consumed topic's decoder under fuzz: random bytes, truncated and bit-flipped valid
messages, valid JSON with wrong types, missing keys, unknown fields, unknown schema versions and
content types, wrong and non-UTF-8 keys, tombstones. Each record either decodes to its topic's
type or raises DeadLetter with one of the documented reasons (what the consumer sends to
`<topic>.dlq`); nothing else ever escapes, so no input can crash a consumer.

The same records through a real consumer on the real broker: tests/integration/test_dlq_fuzz.py.
"""

from __future__ import annotations

import typing
from collections import Counter
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from governor import events
from governor.bus import (
    H_CONTENT_TYPE,
    H_SCHEMA_VERSION,
    DeadLetter,
    Decoder,
    DlqReason,
    codec_for,
)
from tests.support.ci import unavailable
from tests.support.policies import scaling_policy

REASONS = set(typing.get_args(DlqReason))
CONSUMED = (
    events.METRICS,
    events.LOAD,
    events.POLICIES,
    events.WORKLOADS,
    events.CLUSTER,
    events.RECOMMENDATIONS,
    events.DECISIONS,
    events.DECIDER_STATE,
)

POLICY = scaling_policy(
    "web",
    "shop",
    {
        "targetRef": {"kind": "Deployment", "name": "web"},
        "minReplicas": 1,
        "maxReplicas": 10,
        "metrics": [
            {
                "name": "rps",
                "source": {"type": "push"},
                "target": {"type": "AverageValue", "averageValue": 70},
            }
        ],
    },
)
W = "shop/Deployment/web"
REASON = events.Reason(rule="metric", detail="rps 120 > 100")
INPUT = events.MetricInput(metric="rps", value=120.0, target=100.0, target_type="AverageValue")
SEEDS: dict[str, msgspec.Struct] = {
    events.METRICS.name: events.MetricSample(workload=W, metric="rps", value=3.5, timestamp=1e9),
    events.LOAD.name: events.LoadWindow(
        workload=W, metric="rps", window="stable", start=0.0, end=60.0, count=3, mean=1.0,
        max=2.0, p95=2.0, newest_sample=59.0,
    ),
    events.POLICIES.name: events.PolicyRecord(policy=POLICY, published_at=1.0),
    events.WORKLOADS.name: events.WorkloadState(
        workload=W, spec_replicas=2, ready_replicas=2, observed_at=1.0, requests={"cpu": 0.5},
        joint_allocate={"deviceTypes": ["gpu", "rdma"]},
    ),
    events.CLUSTER.name: events.NodeState(
        node="n1", pool="default", allocatable={"cpu": 8.0},
        devices=[events.Device(type="gpu", minor=0)],
    ),
    events.RECOMMENDATIONS.name: events.Recommendation(
        workload=W, pool="default", desired=3, current=2, ready=2, min_replicas=1,
        max_replicas=10, floor=1, priority=0, weight=1.0, requests={"cpu": 0.5}, elastic=False,
        reasons=[REASON], inputs=[INPUT], newest_input=1.0, policy_generation=1, computed_at=2.0,
    ),
    events.DECISIONS.name: events.ScaleDecision(
        decision_id="d-1", workload=W, seq=4, from_replicas=2, to_replicas=3, reasons=[REASON],
        inputs=[INPUT], policy_generation=1, newest_input=1.0, decided_at=2.0,
    ),
    events.DECIDER_STATE.name: events.DeciderCheckpoint(workload=W, seq=4, scale_state=b"\x01"),
}  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _record(topic: str, value: bytes | None, key: bytes | None, headers: Any) -> SimpleNamespace:
    return SimpleNamespace(
        topic=topic, partition=0, offset=0, timestamp=0, value=value, key=key, headers=headers
    )


@st.composite
def records(draw: st.DrawFn, topic: events.Topic[Any]) -> SimpleNamespace:
    seed = SEEDS[topic.name]
    codec = codec_for(topic)
    raw = codec.encode(seed)
    key = topic.key(seed).encode()
    doc = msgspec.json.decode(raw)
    kind = draw(st.sampled_from(["bytes", "truncate", "flip", "drop", "retype", "extra", "valid"]))
    if kind == "bytes":
        raw = draw(st.binary(max_size=300))
    elif kind == "truncate":
        raw = raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]
    elif kind == "flip":
        i = draw(st.integers(0, len(raw) - 1))
        raw = raw[:i] + bytes([raw[i] ^ (1 << draw(st.integers(0, 7)))]) + raw[i + 1 :]
    elif kind in ("drop", "retype", "extra"):
        field = draw(st.sampled_from(sorted(doc)))
        if kind == "drop":
            doc.pop(field)
        elif kind == "retype":
            doc[field] = draw(json_values)
        else:
            doc[draw(st.text(min_size=1, max_size=8))] = draw(json_values)
        raw = msgspec.json.encode(doc)
    headers: Any = draw(
        st.sampled_from(
            [
                codec.headers,
                None,
                ((H_SCHEMA_VERSION, b"2"),),
                ((H_SCHEMA_VERSION, b"one"), (H_CONTENT_TYPE, codec.headers[0][1])),
                ((H_CONTENT_TYPE, b"application/avro"),),
                (*codec.headers, ("x-trace", b"1")),
            ]
        )
    )
    key_kind = draw(st.sampled_from(["right", "right", "wrong", "none", "not-utf8"]))
    rkey = {"right": key, "wrong": b"other/key", "none": None, "not-utf8": b"\xff\xfe"}[key_kind]
    value = None if draw(st.integers(0, 19)) == 0 else raw  # sometimes a tombstone
    return _record(topic.name, value, rkey, headers)


@pytest.mark.parametrize("topic", CONSUMED, ids=lambda t: t.name)
def test_the_seed_decodes(topic: events.Topic[Any]) -> None:
    codec = codec_for(topic)
    seed = SEEDS[topic.name]
    msg = Decoder(topic)(
        _record(topic.name, codec.encode(seed), topic.key(seed).encode(), codec.headers)
    )
    assert msg.value == seed


OUTCOMES: Counter[str] = Counter()


@pytest.mark.parametrize("topic", CONSUMED, ids=lambda t: t.name)
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_decoder_decodes_or_dead_letters_with_a_reason(
    topic: events.Topic[Any], data: st.DataObject
) -> None:
    rec = data.draw(records(topic))
    decoder = Decoder(topic)
    try:
        msg = decoder(rec)
    except DeadLetter as e:
        refused: DeadLetter | None = e
    else:
        refused = None
    if refused is not None:
        assert refused.reason in REASONS
        assert refused.detail
        OUTCOMES[f"dlq:{refused.reason}"] += 1
        return
    OUTCOMES["decoded"] += 1
    assert isinstance(msg.value, topic.type) or (msg.value is None and topic.compacted)
    # the quick path agrees with the full decoder on what it accepts
    quick = decoder.value_of(rec.value, rec.key, rec.headers)
    assert quick is None or quick == msg.value


def test_fuzz_reached_every_outcome() -> None:
    """Runs after the fuzz in this module: it must have seen decodes and every kind of refusal
    the mutations can cause (so the strategies are not silently producing one case)."""
    if not OUTCOMES:
        unavailable("run with the fuzz tests of this module")
    print(f"decoder fuzz outcomes: {dict(OUTCOMES)}")
    for want in ("decoded", "dlq:decode", "dlq:validation", "dlq:key", "dlq:schema_version",
                 "dlq:content_type", "dlq:tombstone"):  # fmt: skip
        assert OUTCOMES[want] > 0, (want, OUTCOMES)
