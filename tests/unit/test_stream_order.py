from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from governor.stream_order import MAX_RESEEK_WAIT_S, StreamOrder

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
    assert order.step(TP, 10, now=100.5) == "ahead"
    assert order.step(TP, 11, now=130.0) == "deliver"
    assert order.step(TP, 12, now=130.0) == "deliver"
    assert order.step(TP, 5, now=131.0) == "duplicate"


def test_the_seek_is_asked_for_again_while_records_still_come_ahead() -> None:
    # faust's fetch loop handed over records fetched before the seek, and they moved its read
    # offset past the seek's: the re-fetch was dropped. Ask again after 1 s, 2 s, 4 s, ...
    order = StreamOrder(gap_timeout=30.0, reseek_after=1.0)
    order.resume(TP, 5)
    steps = [
        (t, order.step(TP, 9 + i, now=t)) for i, t in enumerate([0.0, 0.5, 1.0, 1.5, 3.0, 3.1])
    ]
    assert [s for _, s in steps] == ["seek", "ahead", "seek", "ahead", "seek", "ahead"]
    assert order.step(TP, 5, now=3.2) == "deliver"  # the re-fetch came
    assert order.step(TP, 6, now=3.2) == "deliver"


@given(st.lists(st.floats(0.0, 2.0), min_size=1, max_size=40), st.floats(0.1, 3.0))
def test_seeks_back_off_and_stop_at_the_gap_timeout(gaps: list[float], first: float) -> None:
    # Records only ever arrive ahead: a seek at the first, then each after twice the wait of the
    # one before; none once the gap is taken (then the record is delivered).
    order = StreamOrder(gap_timeout=30.0, reseek_after=first)
    order.resume(TP, 0)
    now, seeks = 0.0, []
    for i, gap in enumerate(gaps):
        now += gap
        step = order.step(TP, 100 + i, now)
        if step == "deliver":  # the gap opened at the first record
            assert now - gaps[0] >= 30.0
            break
        assert now - gaps[0] < 30.0
        if step == "seek":
            seeks.append(now)
    assert seeks[0] == gaps[0]
    for k, (a, b) in enumerate(itertools.pairwise(seeks)):
        assert b - a >= min(first * 2**k, max(MAX_RESEEK_WAIT_S, first))


def test_the_clock_seeks_a_gap_again_when_nothing_comes_ahead() -> None:
    order = StreamOrder(gap_timeout=30.0)
    order.resume("p", 10)
    assert order.step("p", 14, now=0.0) == "seek"  # ahead: sought back to 10
    assert order.due_seeks(0.5) == []  # the re-fetch may still come
    assert order.due_seeks(1.0) == [("p", 10)]  # it did not, and nothing came ahead since
    assert order.due_seeks(2.5) == []  # the wait doubled: 2 s after the last
    assert order.due_seeks(3.0) == [("p", 10)]
    assert order.step("p", 10, now=3.1) == "deliver"  # the gap closed: nothing to seek
    assert order.due_seeks(100.0) == []


def test_the_clock_keeps_seeking_at_the_capped_wait_until_the_timeout() -> None:
    # 1, 2, 4, then every 4 s: the last seek comes within a wait of the timeout, not half of it.
    order = StreamOrder(gap_timeout=30.0, reseek_after=1.0)
    order.resume("p", 0)
    assert order.step("p", 3, now=0.0) == "seek"
    sought = [t for t in (x / 10 for x in range(1, 400)) if order.due_seeks(t)]
    assert sought == [1.0, 3.0, 7.0, 11.0, 15.0, 19.0, 23.0, 27.0]


def test_the_clock_stops_seeking_a_gap_after_the_timeout() -> None:
    order = StreamOrder(gap_timeout=5.0)
    order.resume("p", 0)
    assert order.step("p", 3, now=0.0) == "seek"
    sought = [t for t in (1.0, 3.0, 4.9, 7.0, 15.0, 31.0) if order.due_seeks(t)]
    assert sought == [1.0, 3.0]  # then 7.0 would be due, past the 5 s timeout
