"""The quick check a consumer takes per record before the full decoder: it accepts exactly the
well-formed records, and everything it refuses goes to the decoder, which says why."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from governor.bus import DeadLetter, Decoder, codec_for
from governor.events import METRICS, MetricSample

CODEC = codec_for(METRICS)
SAMPLE = MetricSample(workload="ns/Deployment/web", metric="rps", value=3.0, timestamp=10.0)
RAW = CODEC.encode(SAMPLE)
KEY = SAMPLE.workload.encode()


def _record(raw: bytes | None, key: bytes | None, headers: object) -> SimpleNamespace:
    return SimpleNamespace(
        topic=METRICS.name, partition=0, offset=7, timestamp=1, value=raw, key=key,
        headers=headers,
    )  # fmt: skip


def test_a_well_formed_record_takes_the_quick_path() -> None:
    d = Decoder(METRICS)
    assert d.value_of(RAW, KEY, CODEC.headers) == SAMPLE
    assert d.value_of(RAW, KEY, list(CODEC.headers)) == SAMPLE  # headers as a list (faust)
    assert d.value_of(RAW, KEY, None) == SAMPLE  # no headers: apps producing directly


@pytest.mark.parametrize(
    ("raw", "key", "headers", "reason"),
    [
        (b"{not json", KEY, CODEC.headers, "decode"),
        (b'{"workload": "x"}', b"x", CODEC.headers, "validation"),
        (RAW, b"ns/Deployment/other", CODEC.headers, "key"),
        (RAW, KEY, (("schema-version", b"99"),), "schema_version"),
        (None, KEY, CODEC.headers, "tombstone"),
    ],
)
def test_what_the_quick_path_refuses_the_decoder_explains(
    raw: bytes | None, key: bytes, headers: object, reason: str
) -> None:
    d = Decoder(METRICS)
    assert d.value_of(raw, key, headers) is None
    with pytest.raises(DeadLetter) as err:
        d(_record(raw, key, headers))
    assert err.value.reason == reason


def test_a_dead_letter_keeps_the_records_headers_then_says_why_and_where() -> None:
    from governor.bus import H_DLQ_INDEX, dlq_headers

    own = [("content-type", b"application/json")]
    got = dlq_headers(own, "decode", "x" * 2000 + "\udc80", "t", 3, 42, [(H_DLQ_INDEX, b"7")])
    assert got[0] == own[0] and got[-1] == (H_DLQ_INDEX, b"7")
    named = dict(got[1:-1])
    assert named["governor-dlq-reason"] == b"decode"
    assert named["governor-dlq-error"] == b"x" * 1000  # capped; never fails on bad text
    assert (named["governor-dlq-topic"], named["governor-dlq-partition"]) == (b"t", b"3")
    assert named["governor-dlq-offset"] == b"42"
