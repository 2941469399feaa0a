"""The aggregator table's layout (governor.cores.state_buckets): many workloads a record, the
oversized ones under their own keys, and no checkpoint cut anywhere by a crash losing a value
or bringing an older one back."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from governor import events
from governor.cores.aggregator import AggregatorCore, WindowSettings, WorkloadSamples, newest_offset
from governor.cores.state_buckets import BUCKET_PREFIX, StateBuckets, bucket_partition
from governor.metric_records import Partitions

PARTS = Partitions(6)
NAMES = [f"ns/Deployment/w{i}" for i in range(12)]


def value(offset: int, size: int) -> bytes:
    """A table value whose newest offset is `offset`, `size` bytes of padding big."""
    return msgspec.msgpack.encode([offset, "x" * size])


def rank(v: bytes) -> int:
    return int(msgspec.msgpack.decode(v)[0])


def layout(max_bytes: int = 4096, per_partition: int = 2) -> StateBuckets:
    return StateBuckets(PARTS.of, rank, per_partition=per_partition, max_bytes=max_bytes)


def apply(table: dict[bytes, bytes], writes: list[tuple[bytes, bytes | None]]) -> None:
    for key, v in writes:
        if v is None:
            table.pop(key, None)
        else:
            table[key] = v


def test_a_checkpoint_writes_one_record_per_bucket_not_per_workload() -> None:
    buckets = layout(per_partition=1)
    table: dict[bytes, bytes] = {}
    writes = buckets.writes([(w, value(1, 100)) for w in NAMES], table.get)
    # One bucket per partition the 12 workloads fall in, each record in its partition.
    keys = [k for k, _ in writes]
    assert len(keys) == len({PARTS.of(w) for w in NAMES}) < len(NAMES)
    assert all(k.startswith(BUCKET_PREFIX) for k in keys)
    apply(table, writes)
    fresh = layout(per_partition=1)
    for w in NAMES:
        assert fresh.stored(w, table.get) == value(1, 100)
        assert bucket_partition(fresh.key_of(w)) == PARTS.of(w)
    assert bucket_partition(NAMES[0].encode()) is None  # a workload's own key


def test_a_value_too_big_for_its_bucket_goes_under_its_own_key_and_back() -> None:
    buckets = layout(max_bytes=1000, per_partition=1)
    w = NAMES[0]
    table: dict[bytes, bytes] = {}
    apply(table, buckets.writes([(w, value(1, 2000))], table.get))
    assert table[w.encode()] == value(1, 2000)  # alone
    assert msgspec.msgpack.decode(table[buckets.key_of(w)]) == {}
    apply(table, buckets.writes([(w, value(2, 10))], table.get))
    assert w.encode() not in table  # back in the bucket, its own key deleted
    assert layout(max_bytes=1000, per_partition=1).stored(w, table.get) == value(2, 10)


def test_every_crash_point_of_a_move_keeps_the_newest_value() -> None:
    # Two mates of one bucket; `w` moves out (too big beside its mate) and back in, and each
    # move's checkpoint is cut after each of its writes: the next owner reads `w`'s newest
    # value that reached the table, never an older copy, never none.
    w = NAMES[0]
    mate = next(n for i in range(100) if PARTS.of(n := f"ns/Deployment/m{i}") == PARTS.of(w))
    sizes = [(10, 10), (10, 1500), (1500, 1500), (10, 1500), (10, 10)]  # (w, mate) per step
    for step in range(1, len(sizes)):
        for cut in range(5):
            table: dict[bytes, bytes] = {}
            buckets = layout(max_bytes=2000, per_partition=1)
            for i, (ws, ms) in enumerate(sizes[:step]):  # the moves before, whole
                apply(
                    table,
                    buckets.writes(
                        [(mate, value(2 * i, ms)), (w, value(2 * i + 1, ws))], table.get
                    ),
                )
            ws, ms = sizes[step]
            new = [(mate, value(2 * step, ms)), (w, value(2 * step + 1, ws))]
            writes = buckets.writes(new, table.get)
            apply(table, writes[:cut])
            landed = {w: value(2 * step - 1, sizes[step - 1][0])}
            for key, v in writes[:cut]:
                if v is not None and (key == w.encode() or w in msgspec.msgpack.decode(v)):
                    landed[w] = new[1][1]
            assert layout(max_bytes=2000, per_partition=1).stored(w, table.get) == landed[w], (
                step,
                cut,
            )


def test_a_mate_not_restored_keeps_its_newer_own_copy_when_its_bucket_is_written() -> None:
    # A crash between a move's writes left `w` in its bucket (v1) and, newer, under its own key
    # (v2). The next owner restores only `mate`; writing their bucket, too big for both, must
    # neither spill `w`'s stale copy over its own key nor drop v2.
    w = NAMES[0]
    mate = next(n for i in range(100) if PARTS.of(n := f"ns/Deployment/m{i}") == PARTS.of(w))
    buckets = layout(max_bytes=2000, per_partition=1)
    key = buckets.key_of(w)
    stale = {mate: msgspec.Raw(value(0, 10)), w: msgspec.Raw(value(1, 900))}  # `w` fits last
    table = {key: msgspec.msgpack.encode(stale), w.encode(): value(2, 900)}
    assert buckets.stored(mate, table.get) == value(0, 10)
    apply(table, buckets.writes([(mate, value(3, 1500))], table.get))
    assert layout(max_bytes=2000, per_partition=1).stored(w, table.get) == value(2, 900)


def test_a_value_written_before_buckets_is_read_and_moved_into_one() -> None:
    w = NAMES[3]
    table = {w.encode(): value(7, 10)}  # the layout before buckets: one record per workload
    buckets = layout()
    assert buckets.stored(w, table.get) == value(7, 10)
    apply(table, buckets.writes([(NAMES[4], value(1, 10))], table.get))  # any change of a mate
    if buckets.key_of(NAMES[4]) == buckets.key_of(w):
        assert w.encode() not in table
    assert layout().stored(w, table.get) == value(7, 10)


def test_an_unreadable_bucket_is_reported_and_starts_its_workloads_over() -> None:
    buckets = layout()
    w = NAMES[0]
    table = {buckets.key_of(w): b"\xc1 not msgpack"}
    assert buckets.stored(w, table.get) is None
    assert buckets.unreadable == [buckets.key_of(w)]


def test_the_newest_offset_of_a_core_value_ranks_its_copies() -> None:
    core = AggregatorCore(WindowSettings())
    w = "ns/Deployment/web"
    samples = [
        (40 + i, events.MetricSample(workload=w, metric="rps", value=1.0, timestamp=ts))
        for i, ts in enumerate([1000.0, 1001.0])
    ]
    core.on(WorkloadSamples(w, samples, now=0.0))
    [write] = core.checkpoint().checkpoints
    assert newest_offset(write.value) == 41  # type: ignore[union-attr]
    assert newest_offset(b"\xc1") == -1
    assert newest_offset(msgspec.msgpack.encode({})) == -1


# A run: checkpoints of (workload index, value size) changes, each possibly cut by a crash
# after some of its writes, and restarts (a new owner: nothing held, the table is the truth).
checkpoint = st.tuples(
    st.lists(st.tuples(st.integers(0, len(NAMES) - 1), st.integers(0, 1500)), max_size=8),
    st.none() | st.integers(0, 20),
)
runs = st.lists(st.one_of(st.just("restart"), checkpoint), max_size=25)


@settings(max_examples=300, deadline=None)
@given(runs)
def test_no_crash_anywhere_loses_a_value_or_brings_an_older_one_back(run: list[object]) -> None:
    table: dict[bytes, bytes] = {}
    buckets = layout(max_bytes=2000, per_partition=1)
    newest: dict[str, bytes] = {}  # each workload's newest value that reached the table
    offset = 0
    for step in run:
        if step == "restart":
            buckets = layout(max_bytes=2000, per_partition=1)
            continue
        assert isinstance(step, tuple)
        changes, crash = step
        changed: dict[str, bytes] = {}
        for i, size in changes:
            w = NAMES[i]
            buckets.stored(w, table.get)  # the shell holds a workload before it changes
            offset += 1
            changed[w] = value(offset, size)
        writes = buckets.writes(list(changed.items()), table.get)
        for key, v in writes:
            assert v is None or len(v) <= 2000 or not key.startswith(BUCKET_PREFIX)
        cut = writes if crash is None else writes[:crash]
        apply(table, cut)
        for key, v in cut:  # what reached the table
            if v is None:
                continue
            held = (
                [key.decode()] if not key.startswith(BUCKET_PREFIX) else msgspec.msgpack.decode(v)
            )
            for w in held:
                mine = changed.get(w)
                if mine is not None and rank(mine) > rank(newest.get(w, value(-1, 0))):
                    newest[w] = mine
        if crash is not None:  # the worker died: the next owner starts from the table
            buckets = layout(max_bytes=2000, per_partition=1)
    fresh = layout(max_bytes=2000, per_partition=1)
    for w in NAMES:
        assert fresh.stored(w, table.get) == newest.get(w)
