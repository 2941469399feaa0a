from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from governor.stream_order import StreamOrder

TP = ("metrics", 0)


def _deliver(order: StreamOrder, offsets: list[int], now: float = 0.0) -> list[int]:
    return [o for o in offsets if order.step(TP, o, now) == "deliver"]


@given(
    folded=st.integers(0, 50),
    committed_back=st.integers(0, 20),
    skipped=st.integers(1, 20),
    stale=st.integers(1, 20),
    tail=st.integers(0, 20),
)
def test_stale_records_before_the_refetch_are_not_folded_and_nothing_is_lost(
    folded: int, committed_back: int, skipped: int, stale: int, tail: int
) -> None:
    # Offsets 0..folded-1 were folded; the commit lags behind; after the rebalance faust first
    # hands over records fetched from past a dropped buffer, then the re-fetch from the commit.
    order = StreamOrder(gap_timeout=30.0)
    order.resume(TP, folded)
    committed = max(0, folded - committed_back)
    stale_from = folded + skipped
    end = stale_from + stale + tail
    arrivals = list(range(stale_from, stale_from + stale)) + list(range(committed, end))
    assert _deliver(order, arrivals) == list(range(folded, end))


@given(st.lists(st.integers(0, 30), max_size=60))
def test_every_offset_is_delivered_at_most_once_and_in_order(offsets: list[int]) -> None:
    order = StreamOrder(gap_timeout=30.0)
    order.resume(TP, 0)
    got = _deliver(order, offsets)
    assert got == sorted(set(got))
    assert got == list(range(len(got)))  # no gap: each delivered offset follows the last


def test_unknown_until_resumed_and_again_after_a_move() -> None:
    order = StreamOrder(gap_timeout=30.0)
    assert order.unknown(TP)
    order.resume(TP, None)  # nothing folded yet: the first record is the start
    assert not order.unknown(TP)
    assert _deliver(order, [7, 8, 8, 10]) == [7, 8]
    assert [order.step(TP, o, 0.0) for o in (11, 12, 9)] == ["ahead", "ahead", "deliver"]
    order.moved()
    assert order.unknown(TP)


def test_a_gap_open_past_the_timeout_is_taken() -> None:
    # Retention deleted the records in between: the partition must not stall for good.
    order = StreamOrder(gap_timeout=30.0)
    order.resume(TP, 5)
    assert order.step(TP, 9, now=100.0) == "seek"
    assert order.expected(TP) == 5
    assert order.step(TP, 10, now=129.0) == "ahead"
    assert order.step(TP, 11, now=130.0) == "deliver"
    assert order.step(TP, 12, now=130.0) == "deliver"
    assert order.step(TP, 5, now=131.0) == "duplicate"
