"""Records of governor.metrics: a single MetricSample or a MetricBatch, read and checked.

`governor.metrics` carries the tagged union `MetricRecord = MetricSample | MetricBatch` (tag
field `kind`). Apps producing directly may leave the tag out of a single sample (the contract
before batches), so a record without a tag is a MetricSample.

The checks a reader applies (pure; the aggregator dead-letters what they refuse):

* a single sample: the record key is its workload (the bus's key rule);
* a batch: the record key is `batch_key(partition)`, the record sits on that partition, and
  every sample's workload hashes to it (`Partitions.of`, the producers' partitioner); a sample
  that fails, or that is not a MetricSample at all, is refused ALONE, by its index in the
  batch, and the others are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
from aiokafka.partitioner import DefaultPartitioner

from governor.bus import DeadLetter, DlqReason
from governor.bus.codec import decoded
from governor.events import MetricBatch, MetricRecord, MetricSample

__all__ = ["Partitions", "Refused", "batch_key", "decode_record", "encode_batch", "split_record"]

BATCH_KEY_PREFIX = "partition:"


def batch_key(partition: int) -> str:
    """The key of a MetricBatch record: its partition (a workload id holds two slashes, so it
    never equals one of these)."""
    return f"{BATCH_KEY_PREFIX}{partition}"


_UNION = msgspec.json.Decoder(MetricRecord)
_SAMPLE = msgspec.json.Decoder(MetricSample)
_ENCODER = msgspec.json.Encoder()


class _Tag(msgspec.Struct):
    """Only the tag of a record: whether a record that is not a valid union member has one."""

    kind: str | None = None


class _LooseBatch(msgspec.Struct, tag_field="kind", tag="batch"):
    """A batch whose samples are not decoded yet: read when the strict decode failed, to keep
    the valid samples and name the bad ones by index."""

    partition: int
    samples: list[msgspec.Raw]


_TAG = msgspec.json.Decoder(_Tag)
_LOOSE = msgspec.json.Decoder(_LooseBatch)


class Partitions:
    """The partition of each workload key on a topic of `count` partitions, as every producer's
    default partitioner (murmur2 of the key) computes it; memoized per workload (aiokafka's
    murmur2 is pure Python)."""

    __slots__ = ("_all", "_memo", "_partitioner", "count")

    def __init__(self, count: int) -> None:
        self.count = count
        self._all = list(range(count))
        self._partitioner = DefaultPartitioner()
        self._memo: dict[str, int] = {}

    def of(self, workload: str) -> int:
        p = self._memo.get(workload)
        if p is None:
            p = self._memo[workload] = self._partitioner(workload.encode(), self._all, self._all)
        return p


@dataclass(frozen=True)
class Refused:
    """A sample of a record that is not aggregated: its index in the batch (0 for a single
    sample), why, and its raw JSON (what goes to the dead-letter topic)."""

    index: int
    reason: DlqReason
    detail: str
    raw: bytes


def _record(raw: bytes) -> MetricRecord:
    try:
        record: MetricRecord = _UNION.decode(raw)
        return record
    except msgspec.ValidationError:
        try:
            tag = _TAG.decode(raw).kind
        except msgspec.ValidationError:
            tag = None
        if tag is not None:  # tagged but invalid: the union's message names the field
            raise
        sample: MetricSample = _SAMPLE.decode(raw)
        return sample


def decode_record(raw: bytes) -> MetricRecord:
    """The record's value, or DeadLetter (reason `decode` or `validation`)."""
    return decoded(_record, raw)


def split_record(
    raw: bytes, key: str | None, partition: int, partitions: Partitions
) -> tuple[list[MetricSample], list[Refused]]:
    """The samples of one record to aggregate (in record order) and the ones refused.

    A record that cannot be read at all raises DeadLetter (the whole record is dead-lettered, as
    for any topic); inside a readable batch each bad sample is refused on its own."""
    try:
        record = decode_record(raw)
    except DeadLetter as whole:
        try:
            loose = _LOOSE.decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError):  # ValidationError included
            raise whole from None  # not even a batch's frame: the whole record goes
        return _split_loose(loose, key, partition, partitions)
    if isinstance(record, MetricSample):
        if key is not None and key != record.workload:
            raise DeadLetter("key", f"record key {key!r}, value's key {record.workload!r}")
        return [record], []
    _check_batch_frame(record.partition, key, partition)
    of = partitions.of
    if all(of(s.workload) == partition for s in record.samples):  # the common case
        return record.samples, []
    good: list[MetricSample] = []
    bad: list[Refused] = []
    for i, s in enumerate(record.samples):
        if of(s.workload) == partition:
            good.append(s)
        else:
            bad.append(
                _wrong_partition(i, s.workload, of(s.workload), partition, _ENCODER.encode(s))
            )
    return good, bad


def _check_batch_frame(batch_partition: int, key: str | None, partition: int) -> None:
    want = batch_key(partition)
    if key != want:
        raise DeadLetter("key", f"a batch on partition {partition} has key {key!r}, not {want!r}")
    if batch_partition != partition:
        raise DeadLetter(
            "key", f"a batch for partition {batch_partition} was written to partition {partition}"
        )


def _wrong_partition(i: int, workload: str, at: int, partition: int, raw: bytes) -> Refused:
    return Refused(
        i, "key", f"samples[{i}]: workload {workload!r} is on partition {at}, not {partition}", raw
    )


def _split_loose(
    loose: _LooseBatch, key: str | None, partition: int, partitions: Partitions
) -> tuple[list[MetricSample], list[Refused]]:
    _check_batch_frame(loose.partition, key, partition)
    good: list[MetricSample] = []
    bad: list[Refused] = []
    for i, item in enumerate(loose.samples):
        raw = bytes(item)
        try:
            s = _SAMPLE.decode(raw)
        except msgspec.ValidationError as e:
            bad.append(Refused(i, "validation", f"samples[{i}]: {e}", raw))
            continue
        at = partitions.of(s.workload)
        if at != partition:
            bad.append(_wrong_partition(i, s.workload, at, partition, raw))
        else:
            good.append(s)
    return good, bad


def encode_batch(partition: int, samples: list[MetricSample]) -> bytes:
    """A MetricBatch record's value."""
    return _ENCODER.encode(MetricBatch(partition=partition, samples=samples))
