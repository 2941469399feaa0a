"""governor.lease: Lease-based leader election, the pure core.

The properties run the core on a simulated API server (one Lease, a resourceVersion that every
write bumps, writes that fail with a conflict when it moved) with random schedules: candidates
that read and write at random times, with random latencies, failed calls, lost answers and
crashes. Whatever the schedule, no two candidates count themselves leader at one instant; and a
holder that stops renewing is replaced within a lease duration and a retry period or two."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from governor.lease import (
    Candidate,
    LeaseRecord,
    check_timing,
    is_leader,
    lost,
    observe,
    plan,
    record_for,
    wrote,
)

D, RD, RP = 15.0, 10.0, 2.0  # client-go's defaults: lease duration, renew deadline, retry period


def test_a_free_or_missing_lease_is_acquired_and_a_held_one_followed_until_it_expires() -> None:
    c = observe(Candidate(), None, None, 0.0, "a")
    assert plan(c, "a", 0.0) == "acquire"
    held = LeaseRecord(holder="b", duration_s=D, transitions=3)
    c = observe(c, held, "7", 1.0, "a")
    assert plan(c, "a", 1.0 + D - 0.001) == "follow"
    c = observe(c, held, "7", 1.0 + D, "a")  # same version: the clock started at the first read
    assert plan(c, "a", 1.0 + D) == "acquire"
    c = observe(c, held, "8", 1.0 + D, "a")  # renewed meanwhile: wait a whole duration again
    assert plan(c, "a", 1.0 + D) == "follow"
    assert plan(observe(c, LeaseRecord(holder=None), "9", 2.0, "a"), "a", 2.0) == "acquire"


def test_records_count_transitions_on_a_change_of_holder_only() -> None:
    held = LeaseRecord(holder="b", duration_s=D, acquire_time=5.0, renew_time=9.0, transitions=3)
    taken = record_for("acquire", held, "a", 100.0, D)
    assert (taken.holder, taken.transitions, taken.acquire_time, taken.renew_time) == (
        "a", 4, 100.0, 100.0,
    )  # fmt: skip
    renewed = record_for("renew", taken, "a", 102.0, D)
    assert (renewed.transitions, renewed.acquire_time, renewed.renew_time) == (4, 100.0, 102.0)
    assert record_for("acquire", None, "a", 1.0, D).transitions == 0
    with pytest.raises(ValueError, match="writes nothing"):
        record_for("follow", held, "a", 1.0, D)


def test_leadership_ends_at_the_renew_deadline_or_when_another_holder_is_seen() -> None:
    mine = LeaseRecord(holder="a", duration_s=D)
    c = wrote(observe(Candidate(), mine, "1", 0.0, "a"), 0.0)
    assert is_leader(c, RD - 0.001, RD) and not is_leader(c, RD, RD)
    assert not is_leader(observe(c, LeaseRecord(holder="b"), "2", 1.0, "a"), 1.0, RD)
    assert not is_leader(lost(c), 1.0, RD)


@pytest.mark.parametrize(("d", "rd", "rp"), [(10, 10, 2), (15, 10, 10), (15, 10, 0), (5, 10, 2)])
def test_timing_must_be_duration_over_deadline_over_period(d: float, rd: float, rp: float) -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        check_timing(d, rd, rp)
    check_timing(D, RD, RP)


# --- a simulated API server and candidates ----------------------------------------------------


@dataclass
class Server:
    record: LeaseRecord | None = None
    rv: int = 0

    def write(self, record: LeaseRecord, expected_rv: int | None) -> bool:
        if (self.record is None) != (expected_rv is None) or (
            expected_rv is not None and expected_rv != self.rv
        ):
            return False  # 409: somebody wrote since that read (or it exists already)
        self.record, self.rv = record, self.rv + 1
        return True


@dataclass
class Sim:
    """Events on a heap: (time, seq, what, candidate, payload)."""

    server: Server = field(default_factory=Server)
    states: dict[str, Candidate] = field(default_factory=dict)
    events: list[tuple[float, int, str, str, object]] = field(default_factory=list)
    seq: itertools.count[int] = field(default_factory=itertools.count)
    dead: set[str] = field(default_factory=set)
    overlaps: list[tuple[float, list[str]]] = field(default_factory=list)
    leader_times: dict[str, list[float]] = field(default_factory=dict)

    def at(self, t: float, what: str, who: str, payload: object = None) -> None:
        heapq.heappush(self.events, (t, next(self.seq), what, who, payload))

    def check(self, t: float) -> None:
        leaders = [w for w, s in self.states.items() if w not in self.dead and is_leader(s, t, RD)]
        for w in leaders:
            self.leader_times.setdefault(w, []).append(t)
        if len(leaders) > 1:
            self.overlaps.append((t, leaders))


Faults = st.lists(
    st.tuples(
        st.floats(0.0, 0.5),  # latency to the server
        st.floats(0.0, 0.5),  # latency of the answer
        st.sampled_from(["ok", "ok", "ok", "read-fails", "write-fails", "answer-lost"]),
    ),
    min_size=1,
    max_size=40,
)


def run_sim(
    n: int,
    faults: list[tuple[float, float, str]],
    starts: list[float],
    kill: dict[str, float],
    cut: tuple[float, float] = (0.0, 0.0),
) -> Sim:
    """`kill`: when a candidate dies. `cut`: from when, and how long, every call of c0 fails
    (partitioned from the API server, but alive and asking itself whether it leads)."""
    sim = Sim()
    names = [f"c{i}" for i in range(n)]
    for name, start in zip(names, starts, strict=True):
        sim.states[name] = Candidate()
        sim.at(start, "step", name)
    fault_of = itertools.cycle(faults)
    horizon = 200.0
    while sim.events:
        t, _, what, who, payload = heapq.heappop(sim.events)
        if t > horizon:
            break
        if who in kill and t >= kill[who]:
            sim.dead.add(who)
        if who in sim.dead:
            continue
        up, down, fault = next(fault_of)
        if who == "c0" and cut[0] <= t < cut[0] + cut[1]:
            fault = "read-fails" if what == "step" else "write-fails"
        s = sim.states[who]
        if what == "step":  # read now (it reaches the server after `up`), then plan
            if fault != "read-fails":
                sim.at(t + up + down, "read", who, (sim.server.record, sim.server.rv))
            else:
                sim.at(t + RP, "step", who)
        elif what == "read":
            record, rv = payload  # type: ignore[misc]
            s = observe(s, record, str(rv) if record is not None else None, t, who)
            sim.states[who] = s
            action = plan(s, who, t)
            if action == "follow":
                sim.at(t + RP, "step", who)
            else:
                new = record_for(action, record, who, t, D)
                sim.at(
                    t + up, "apply", who, (new, rv if record is not None else None, t, down, fault)
                )
        elif what == "apply":
            new, expected, started, down, fault = payload  # type: ignore[misc]
            ok = fault != "write-fails" and sim.server.write(new, expected)
            if fault != "answer-lost":
                sim.at(t + down, "answer", who, (ok, new, sim.server.rv, started))
            else:
                sim.at(t + down + RP, "step", who)
        elif what == "answer":
            ok, new, rv, started = payload  # type: ignore[misc]
            if ok:
                sim.states[who] = wrote(observe(s, new, str(rv), t, who), started)
            sim.at(t + RP, "step", who)
        sim.check(t)
    return sim


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(2, 4),
    faults=Faults,
    starts=st.lists(st.floats(0.0, 20.0), min_size=4, max_size=4),
    kill_at=st.one_of(st.none(), st.floats(0.0, 100.0)),
    cut=st.tuples(st.floats(0.0, 60.0), st.floats(0.0, 40.0)),
)
def test_never_two_leaders_at_one_instant(
    n: int,
    faults: list[tuple[float, float, str]],
    starts: list[float],
    kill_at: float | None,
    cut: tuple[float, float],
) -> None:
    kill = {} if kill_at is None else {"c0": kill_at}
    sim = run_sim(n, faults, starts[:n], kill, cut)
    assert not sim.overlaps, sim.overlaps[:3]


@settings(max_examples=200, deadline=None)
@given(
    start_b=st.floats(0.0, 10.0),
    kill_at=st.floats(3.0, 60.0),
    latency=st.floats(0.0, 0.5),
)
@example(start_b=0.0, kill_at=17.5, latency=0.484375)
def test_a_holder_that_stops_renewing_is_replaced_within_a_lease_duration(
    start_b: float, kill_at: float, latency: float
) -> None:
    sim = run_sim(2, [(latency, latency, "ok")], [0.0, start_b + 2.0], {"c0": kill_at})
    # c0 held it from the start and wrote last before it died; c1 (no faults) sees that version
    # within a retry period and waits a duration from then. One that starts after the holder
    # died cannot know how old the Lease is: it waits a duration from its first read.
    assert sim.leader_times.get("c0"), "the first candidate never led"
    took_over = [t for t in sim.leader_times.get("c1", []) if t >= kill_at]
    assert took_over, "nobody took over"
    # Each call is one latency out and one back. c1's read snapshot may just miss the last write
    # (2 latencies to answer), its next one answers up to RP + 4 latencies after that write; from
    # that observation a duration, up to one more cycle (RP + 2) to notice it expired, and the
    # write of its own (2): D + 2 RP + 8 latencies. Found by hypothesis with 6 (0.16 s late).
    bound = max(kill_at, start_b + 2.0) + D + 2 * RP + 8 * latency
    assert took_over[0] <= bound, (took_over[0], bound)
    assert not sim.overlaps


# --- the shell's wire format (governor.leader) ---------------------------------------------


def test_a_lease_object_round_trips_through_the_wire_format() -> None:
    from governor.leader import format_micro_time, lease_object, parse_lease

    rec = LeaseRecord(
        holder="a", duration_s=15.0, acquire_time=1700000000.25, renew_time=1700000002.5,
        transitions=2,
    )  # fmt: skip
    obj = lease_object("l", "ns", rec, "41")
    assert obj["metadata"] == {"name": "l", "namespace": "ns", "resourceVersion": "41"}
    assert (
        obj["spec"]["renewTime"]
        == format_micro_time(1700000002.5)
        == ("2023-11-14T22:13:22.500000Z")
    )
    assert parse_lease(obj) == (rec, "41")
    assert parse_lease(None) == (None, None)
    # a released Lease (holderIdentity "") is free; a create carries no resourceVersion
    freed = lease_object("l", "ns", LeaseRecord(holder=None, duration_s=1.0), None)
    assert "resourceVersion" not in freed["metadata"]
    assert parse_lease(freed)[0] == LeaseRecord(holder=None, duration_s=1.0)
