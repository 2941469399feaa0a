"""The aggregator table's layout: many workloads' values in one table record.

A checkpoint used to write one table record per changed workload, and faust sends each record
of a table's changelog on its own (~45 µs of the worker each, plus the broker's share): at
10,000 workloads and a sample a second, 14 % of the aggregator's CPU (docs/performance.md). So the
values of the workloads of one metrics partition are grouped into `per_partition` buckets by a
crc32 of the workload id, and a checkpoint writes one record per changed bucket, each holding
every member's value (`Bucket`: workload -> its encoded `WorkloadWindows`): 1,667 workloads a
partition at 10,000 and 64 buckets make ~26 members and ~65 KB a record, one send instead of 26.

A bucket's key names its partition (`\\x00<partition>.<bucket>`, no workload id starts with a
NUL), so its changelog record goes where its members' would and is restored with their metrics
partition. A bucket never grows past `max_bytes`: the members that do not fit are written under
their own key (the workload id, the layout before buckets), so a record stays well inside
Kafka's 1 MB limit however large a policy's windows make a value ("spilled").

A workload can have two copies in the table, in its bucket and under its own key: a checkpoint
cut by a crash between the records of a move, or a table written before buckets. Which copy is
current is decided by the source offsets in them (`rank`: the newest offset folded), the bucket
on a tie (equal offsets fold the same samples; a policy's new windows are applied on restore
either way). A move writes the new copy first and drops the old one after (the bucket without
the member, or a tombstone for its own key), both in the one changelog partition, so a crash
leaves at most a stale copy, never none. Revoked partitions clear what is held here: the table
is the truth again.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable

import msgspec

__all__ = ["BUCKET_PREFIX", "StateBuckets", "bucket_partition"]

BUCKET_PREFIX = b"\x00"

# A bucket's members: workload id -> its encoded value (a view into the record read, or the
# bytes a checkpoint encoded).
Bucket = dict[str, msgspec.Raw]

_BUCKET_ENC = msgspec.msgpack.Encoder()
_BUCKET_DEC = msgspec.msgpack.Decoder(Bucket)

Read = Callable[[bytes], bytes | None]
Write = tuple[bytes, bytes | None]  # a table key and its value (None: delete the key)


def bucket_partition(key: bytes) -> int | None:
    """The partition a bucket key names (None: a workload's own key)."""
    if not key.startswith(BUCKET_PREFIX):
        return None
    return int(key[1:].split(b".", 1)[0])


class StateBuckets:
    """Which table record holds each workload's value, and what a checkpoint writes.

    `stored(workload, read)` is a workload's current value (`read`: the table's `get`);
    `writes(changed, read)` the table writes of a checkpoint, in order. Both keep the members
    of the buckets they touched, so a checkpoint rewrites a bucket's unchanged members too."""

    def __init__(
        self,
        partition_of: Callable[[str], int],
        rank: Callable[[bytes], int],
        per_partition: int = 64,
        max_bytes: int = 512 * 1024,
    ) -> None:
        self.partition_of = partition_of
        self.rank = rank
        self.per_partition = per_partition
        self.max_bytes = max_bytes
        self.buckets: dict[bytes, Bucket] = {}  # the buckets read or written since `clear`
        self.own: set[str] = set()  # workloads whose own key is in the table
        self.unreadable: list[bytes] = []  # bucket records that were not (for the shell's log)

    def key_of(self, workload: str) -> bytes:
        slot = zlib.crc32(workload.encode()) % self.per_partition
        return b"%s%d.%d" % (BUCKET_PREFIX, self.partition_of(workload), slot)

    def clear(self) -> None:
        self.buckets.clear()
        self.own.clear()

    def bucket(self, key: bytes, read: Read) -> Bucket:
        """A bucket's members, read once (an unreadable record: none), each the newer of its
        copies: a member not restored here is still written with its bucket, or spilled."""
        members = self.buckets.get(key)
        if members is None:
            stored = read(key)
            members = {}
            if stored is not None:
                try:
                    members = _BUCKET_DEC.decode(stored)
                except msgspec.DecodeError:
                    self.unreadable.append(key)
            self.buckets[key] = members
            for workload in list(members):
                self.take_own(workload, members, read)
        return members

    def take_own(self, workload: str, members: Bucket, read: Read) -> None:
        """`workload`'s own-key copy into `members` if it is the newer (see the docstring)."""
        own = read(workload.encode())
        if own is None:
            return
        self.own.add(workload)
        in_bucket = members.get(workload)
        if in_bucket is None or self.rank(own) > self.rank(bytes(in_bucket)):
            members[workload] = msgspec.Raw(own)

    def workloads_in(self, key: bytes, read: Read) -> list[str]:
        """The workloads a table key holds values of."""
        if bucket_partition(key) is None:
            return [key.decode()]
        return list(self.bucket(key, read))

    def stored(self, workload: str, read: Read) -> bytes | None:
        """`workload`'s current value: the newer of its copies."""
        members = self.bucket(self.key_of(workload), read)
        if workload not in members:  # spilled: under its own key alone
            self.take_own(workload, members, read)
        value = members.get(workload)
        return None if value is None else bytes(value)

    def writes(self, changed: Iterable[tuple[str, bytes]], read: Read) -> list[Write]:
        """A checkpoint's table writes for these new values: per bucket touched, the members
        that move out under their own keys first, then the bucket, then the own keys of the
        members back in it deleted."""
        touched: dict[bytes, None] = {}
        for workload, value in changed:
            key = self.key_of(workload)
            self.bucket(key, read)[workload] = msgspec.Raw(value)
            touched[key] = None
        out: list[Write] = []
        for key in touched:
            out += self.bucket_writes(key)
        return out

    def bucket_writes(self, key: bytes) -> list[Write]:
        """One bucket's writes: its members in order while they fit, the rest under their own
        keys (written first; those stay out of the bucket until they change again)."""
        kept: Bucket = {}
        size = 5  # msgpack's map header, and each member's key header below: at most 5 bytes
        spilled: list[Write] = []
        for workload, value in self.buckets[key].items():
            cost = len(value) + len(workload.encode()) + 5
            if size + cost <= self.max_bytes:
                kept[workload] = value
                size += cost
            else:
                self.own.add(workload)
                spilled.append((workload.encode(), bytes(value)))
        back = [w for w in kept if w in self.own]
        self.own.difference_update(back)
        record = _BUCKET_ENC.encode(kept)
        # Held as views into the record the table keeps, not as a second copy of each value.
        self.buckets[key] = _BUCKET_DEC.decode(record)
        return [*spilled, (key, record), *((w.encode(), None) for w in back)]
