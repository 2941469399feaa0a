"""The wire format of every topic: msgspec JSON and its headers; record -> Message or DeadLetter."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, Literal, TypeVar

import msgspec

from governor.events import SCHEMA_VERSION, Topic

T = TypeVar("T", bound=msgspec.Struct)

CONTENT_TYPE = "application/json"
H_CONTENT_TYPE = "content-type"
H_SCHEMA_VERSION = "schema-version"
H_DLQ_REASON = "governor-dlq-reason"
H_DLQ_ERROR = "governor-dlq-error"
H_DLQ_TOPIC = "governor-dlq-topic"
H_DLQ_PARTITION = "governor-dlq-partition"
H_DLQ_OFFSET = "governor-dlq-offset"
# A refused sample of a MetricBatch record: its index in the batch's samples.
H_DLQ_INDEX = "governor-dlq-index"

DlqReason = Literal[
    "decode",  # not JSON (or not UTF-8, truncated, ...)
    "validation",  # JSON, but not the topic's type (msgspec or __post_init__ said no)
    "schema_version",  # a schema-version header other than ours: a breaking change's message
    "content_type",  # a content-type header other than application/json
    "key",  # the record's key is not the topic's key of its value (would break per-key order)
    "tombstone",  # a null value on a topic that is not compacted
    "handler",  # the handler raised on it
]


def dlq_headers(
    headers: Sequence[tuple[str, bytes]],
    reason: str,
    detail: str,
    topic: str,
    partition: int,
    offset: int,
    extra: Sequence[tuple[str, bytes]] = (),
) -> list[tuple[str, bytes]]:
    """A dead letter's headers: the record's own, then why and where it came from."""
    return [
        *headers,
        (H_DLQ_REASON, reason.encode()),
        (H_DLQ_ERROR, detail[:1000].encode("utf-8", "replace")),
        (H_DLQ_TOPIC, topic.encode()),
        (H_DLQ_PARTITION, str(partition).encode()),
        (H_DLQ_OFFSET, str(offset).encode()),
        *extra,
    ]


class Codec(Generic[T]):
    """JSON (msgspec) for one topic's type; the headers every message of the topic carries."""

    __slots__ = ("_decoder", "_encoder", "header_list", "headers", "type")

    content_type = CONTENT_TYPE

    def __init__(self, type_: type[T]) -> None:
        self.type = type_
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(type_)
        self.headers: tuple[tuple[str, bytes], ...] = (
            (H_CONTENT_TYPE, CONTENT_TYPE.encode()),
            (H_SCHEMA_VERSION, str(SCHEMA_VERSION).encode()),
        )
        # aiokafka's C record builder wants a list; it only reads it, so one list is shared.
        self.header_list: list[tuple[str, bytes]] = list(self.headers)

    def encode(self, value: T) -> bytes:
        return self._encoder.encode(value)

    def decode(self, data: bytes) -> T:
        return self._decoder.decode(data)


_CODECS: dict[str, Codec[Any]] = {}


def codec_for(topic: Topic[T]) -> Codec[T]:
    c = _CODECS.get(topic.name)
    if c is None or c.type is not topic.type:
        c = _CODECS[topic.name] = Codec(topic.type)
    return c


class DeadLetter(Exception):
    """Why a record could not become its topic's type."""

    def __init__(self, reason: DlqReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: DlqReason = reason
        self.detail = detail


V = TypeVar("V")


def decoded(decode: Callable[[bytes], V], raw: bytes) -> V:
    """`decode(raw)`, else DeadLetter: `validation` (a field is wrong: msgspec names it) or
    `decode` (not JSON, or not UTF-8)."""
    try:
        return decode(raw)
    except msgspec.ValidationError as e:
        raise DeadLetter("validation", str(e)) from None
    except msgspec.DecodeError as e:
        raise DeadLetter("decode", str(e)) from None
    except UnicodeDecodeError as e:  # msgspec raises it for a string that is not UTF-8
        raise DeadLetter("decode", f"not UTF-8: {e}") from None


class Message(msgspec.Struct, Generic[T], frozen=True, gc=False):
    """A decoded record. `value` is None for a tombstone (compacted topics only)."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: T | None
    timestamp_ms: int


class Decoder(Generic[T]):
    """Record -> Message for one topic, or DeadLetter."""

    __slots__ = ("_check_key", "_decode", "_expected_headers", "_key", "compacted", "name")

    def __init__(self, topic: Topic[T], check_key: bool = True) -> None:
        codec = codec_for(topic)
        self.name = topic.name
        self._decode = codec._decoder.decode
        self._key = topic.key
        self._expected_headers = codec.headers
        self._check_key = check_key
        self.compacted = topic.compacted

    def _check_headers(self, headers: Sequence[tuple[str, bytes]]) -> None:
        for k, v in headers:
            if k == H_SCHEMA_VERSION and v != self._expected_headers[1][1]:
                raise DeadLetter(
                    "schema_version",
                    f"schema-version {v!r}, this reader understands {SCHEMA_VERSION}",
                )
            if k == H_CONTENT_TYPE and v != self._expected_headers[0][1]:
                raise DeadLetter("content_type", f"content-type {v!r}, expected {CONTENT_TYPE}")

    def value_of(self, raw: bytes | None, key: bytes | None, headers: Any) -> T | None:
        """The value of a well-formed record (a value, a UTF-8 key matching it, the expected
        headers), else None: `__call__` then says what is wrong, or accepts what this quick
        check does not (extra headers). Consumer's own loop inlines the same check."""
        if raw is None or key is None or (headers and tuple(headers) != self._expected_headers):
            return None
        try:
            value = self._decode(raw)
            ok = not self._check_key or self._key(value) == key.decode()
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None
        return value if ok else None

    def __call__(self, rec: Any) -> Message[T]:
        headers = rec.headers
        if headers and headers != self._expected_headers:
            self._check_headers(headers)
        kb = rec.key
        try:
            key = None if kb is None else kb.decode()
        except UnicodeDecodeError as e:
            raise DeadLetter("decode", f"key is not UTF-8: {e}") from None
        raw = rec.value
        if raw is None:
            if not self.compacted:
                raise DeadLetter("tombstone", "null value on a topic that is not compacted")
            if key is None:
                raise DeadLetter("tombstone", "tombstone without a key")
            value = None
        else:
            value = decoded(self._decode, raw)
            if self._check_key and key is not None:
                want = self._key(value)
                if want != key:
                    raise DeadLetter("key", f"record key {key!r}, value's key {want!r}")
        return Message(rec.topic, rec.partition, rec.offset, key, value, rec.timestamp)
