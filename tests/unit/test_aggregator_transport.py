"""The aggregator's in-order delivery of a stream partition across rebalances (StreamOrder)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from governor_aggregator.transport import StreamOrder

P = ("metrics", 4)


def run(order: StreamOrder, offsets: list[int]) -> list[int]:
    """The drain loop's use of StreamOrder: a gap is closed by a seek back (never expired)."""
    delivered = []
    for off in offsets:
        step = order.step(P, off)
        if step == "deliver":
            delivered.append(off)
        elif step == "gap":
            order.seeking_back(P)
    return delivered


def test_records_from_before_the_seek_are_not_delivered_ahead_of_the_refetched_ones() -> None:
    # The rebalance test's failure: committed 303, records 306.. from before the seek arrive
    # first, then the seek's 303..
    order = StreamOrder()
    order.resumed([P])
    assert order.step(P, 300) == "skip"  # resumed, not sought yet
    order.sought([P], {P: 303})
    assert order.step(P, 306) == "gap"
    assert order.seeking_back(P) == 303
    assert [order.step(P, o) for o in range(307, 324)] == ["skip"] * 17
    assert run(order, list(range(303, 330))) == list(range(303, 330))


def test_duplicates_and_a_partition_without_a_committed_offset() -> None:
    order = StreamOrder()
    order.sought([], {P: None})
    assert order.step(P, 50) == "deliver"  # no committed offset: the reset position is next
    assert order.step(P, 50) == "skip"
    assert order.step(P, 51) == "deliver"


def test_a_jump_over_expired_records_is_taken() -> None:
    order = StreamOrder()
    order.sought([P], {P: 100})
    assert order.step(P, 150) == "gap"
    order.expired(P, 150)
    assert order.step(P, 151) == "deliver"


@st.composite
def stale_and_refetched(draw: st.DrawFn) -> tuple[int, int, list[int]]:
    committed = draw(st.integers(0, 1000))
    refetched = list(range(committed, committed + draw(st.integers(0, 40))))
    start = committed + draw(st.integers(0, 30))
    stale = list(range(start, start + draw(st.integers(0, 40))))
    # any interleaving that keeps each fetch's own order
    merged, i, j = [], 0, 0
    for take_stale in draw(st.lists(st.booleans(), min_size=len(stale) + len(refetched))):
        if (take_stale and i < len(stale)) or j >= len(refetched):
            if i < len(stale):
                merged.append(stale[i])
                i += 1
        else:
            merged.append(refetched[j])
            j += 1
    merged += stale[i:] + refetched[j:]
    return committed, len(refetched), merged


@given(stale_and_refetched())
def test_delivery_is_contiguous_from_the_committed_offset(case: tuple[int, int, list[int]]) -> None:
    committed, n_refetched, offsets = case
    order = StreamOrder()
    order.resumed([P])
    order.sought([P], {P: committed})
    delivered = run(order, offsets)
    assert delivered == list(range(committed, committed + len(delivered)))
    assert len(delivered) >= n_refetched  # everything the seek fetched again is delivered
