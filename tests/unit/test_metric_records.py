"""Records of governor.metrics: single samples (tagged or as apps write them) and batches, and
the per-sample checks that refuse a bad sample of a batch alone, by index."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor import events
from governor.bus import DeadLetter
from governor.metric_records import (
    Partitions,
    batch_key,
    decode_record,
    encode_batch,
    split_record,
)

PARTS = Partitions(6)


def sample(workload: str, value: float = 1.0, ts: float = 10.0) -> events.MetricSample:
    return events.MetricSample(workload=workload, metric="rps", value=value, timestamp=ts)


def workloads_on(partition: int, n: int) -> list[str]:
    out = []
    i = 0
    while len(out) < n:
        wl = f"ns/Deployment/w{i}"
        if PARTS.of(wl) == partition:
            out.append(wl)
        i += 1
    return out


def test_a_sample_without_the_tag_as_apps_write_it_is_a_metric_sample() -> None:
    raw = b'{"workload":"ns/Deployment/a","metric":"rps","value":3,"timestamp":1.5}'
    assert decode_record(raw) == sample("ns/Deployment/a", 3.0, 1.5)
    good, bad = split_record(raw, "ns/Deployment/a", PARTS.of("ns/Deployment/a"), PARTS)
    assert (good, bad) == ([sample("ns/Deployment/a", 3.0, 1.5)], [])


def test_a_tagged_sample_and_a_batch_round_trip() -> None:
    s = sample("ns/Deployment/a")
    assert msgspec.json.encode(s).startswith(b'{"kind":"sample"')
    assert decode_record(msgspec.json.encode(s)) == s
    p = PARTS.of(s.workload)
    raw = encode_batch(p, [s, s])
    assert decode_record(raw) == events.MetricBatch(partition=p, samples=[s, s])


def test_the_partitioner_is_the_producers() -> None:
    # aiokafka's DefaultPartitioner (murmur2, Kafka's Java default): what a producer that keys a
    # single sample by its workload picks, so batches and single samples of a workload share a
    # partition and its order.
    from aiokafka.partitioner import DefaultPartitioner

    every = list(range(6))
    for i in range(50):
        wl = f"ns/Deployment/x{i}"
        assert PARTS.of(wl) == DefaultPartitioner()(wl.encode(), every, every)


def test_a_batch_with_one_invalid_sample_keeps_the_others_and_names_its_index() -> None:
    wls = workloads_on(2, 3)
    raw = encode_batch(2, [sample(w) for w in wls])
    # The middle sample's value is not a number.
    raw = raw.replace(
        msgspec.json.encode(sample(wls[1]))[:-1] + b"}",
        msgspec.json.encode(sample(wls[1])).replace(b'"value":1.0', b'"value":"lots"'),
    )
    assert b'"lots"' in raw
    good, bad = split_record(raw, batch_key(2), 2, PARTS)
    assert [s.workload for s in good] == [wls[0], wls[2]]
    assert [(r.index, r.reason) for r in bad] == [(1, "validation")]
    assert b'"lots"' in bad[0].raw and "samples[1]" in bad[0].detail


def test_a_sample_of_another_partition_is_refused_alone() -> None:
    (on2,) = workloads_on(2, 1)
    (on3,) = workloads_on(3, 1)
    raw = encode_batch(2, [sample(on2), sample(on3), sample(on2, 2.0)])
    good, bad = split_record(raw, batch_key(2), 2, PARTS)
    assert [s.value for s in good] == [1.0, 2.0]
    assert [(r.index, r.reason) for r in bad] == [(1, "key")]
    assert decode_record(bad[0].raw) == sample(on3)


@pytest.mark.parametrize(
    ("key", "partition", "reason"),
    [
        ("ns/Deployment/w0", 2, "key"),  # a batch keyed like a sample
        (batch_key(2), 4, "key"),  # on another partition than it names
        (None, 2, "key"),
    ],
)
def test_a_batch_in_the_wrong_place_goes_whole(
    key: str | None, partition: int, reason: str
) -> None:
    raw = encode_batch(2, [sample(w) for w in workloads_on(2, 2)])
    with pytest.raises(DeadLetter) as e:
        split_record(raw, key, partition, PARTS)
    assert e.value.reason == reason


def test_a_single_sample_keyed_by_another_workload_goes() -> None:
    raw = msgspec.json.encode(sample("ns/Deployment/a"))
    with pytest.raises(DeadLetter) as e:
        split_record(raw, "ns/Deployment/b", 0, PARTS)
    assert e.value.reason == "key"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"not json", "decode"),
        (b'{"kind":"batch","partition":"x","samples":[]}', "validation"),
        (b'{"kind":"other","workload":"a"}', "validation"),
        (b'{"workload":"ns/Deployment/a","metric":"rps","value":"x","timestamp":1}', "validation"),
    ],
)
def test_unreadable_records_go_whole(raw: bytes, reason: str) -> None:
    with pytest.raises(DeadLetter) as e:
        split_record(raw, "ns/Deployment/a", 0, PARTS)
    assert e.value.reason == reason


@given(
    st.lists(
        st.tuples(st.integers(0, 40), st.floats(-1e6, 1e6), st.floats(0, 1e9)),
        min_size=1,
        max_size=60,
    ),
    st.integers(0, 5),
)
def test_a_valid_batch_yields_its_samples_in_order(
    items: list[tuple[int, float, float]], partition: int
) -> None:
    pool = workloads_on(partition, 41)
    samples = [sample(pool[i], v, ts) for i, v, ts in items]
    good, bad = split_record(
        encode_batch(partition, samples), batch_key(partition), partition, PARTS
    )
    assert bad == [] and good == samples
