"""governor.shell.run_core: checkpoints acknowledged before records, the input committed after
both; lanes keep each key in order and commit when idle; merged sources wait only on the last
and commit only what handed out records; an awaited tick."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from governor.cores import Outputs
from governor.shell import deliver, merged, run_core

Log = list[tuple[str, object]]


class ListSource:
    """Batches handed out in order; `commit` logs how many records were handed out so far."""

    def __init__(self, batches: list[list[int]], log: Log) -> None:
        self.batches, self.log, self.handed = list(batches), log, 0

    async def poll(self, timeout_ms: int) -> Sequence[int]:
        await asyncio.sleep(0)
        batch = self.batches.pop(0) if self.batches else []
        self.handed += len(batch)
        return batch

    async def commit(self) -> None:
        self.log.append(("commit", self.handed))


class LogSink:
    """Acknowledges at once, logging each item under its name (the order is what is tested; a
    real sink's retries are tests/integration/test_shell.py's)."""

    def __init__(self, name: str, log: Log) -> None:
        self.name, self.log = name, log

    async def put(self, items: Sequence[str]) -> None:
        for item in items:
            self.log.append((self.name, item))


class Doubler:
    """Each record: a checkpoint `c<r>` and a record `r<r>`; each tick: a record `tick`."""

    def on(self, record: int) -> Outputs[str]:
        return Outputs(checkpoints=[f"c{record}"], records=[f"r{record}"])

    def tick(self, now: float) -> Outputs[str]:
        return Outputs(records=["tick"])


def run(core: Doubler, batches: list[list[int]], **lanes: object) -> Log:
    """`run_core` over `batches` until they are handed out; what the sinks and commits saw."""
    log: Log = []
    source = ListSource(batches, log)
    out, ckpt = LogSink("out", log), LogSink("ckpt", log)

    def stop() -> bool:
        return not source.batches

    asyncio.run(run_core(core, source, out, checkpoints=ckpt, until=stop, **lanes))  # type: ignore[arg-type]
    return log


def check_order(log: Log) -> None:
    """Every record after its checkpoint; every commit after the outputs of what it covers."""
    seen: set[object] = set()
    for kind, what in log:
        if kind == "out" and isinstance(what, str) and what.startswith("r"):
            assert ("ckpt", "c" + what[1:]) in seen, f"{what} before its checkpoint"
        if kind == "commit":
            assert isinstance(what, int)
            for r in range(what):
                assert ("out", f"r{r}") in seen, f"commit of {what} before r{r} was out"
        seen.add((kind, what))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=8))
def test_checkpoints_then_records_then_commit(sizes: list[int]) -> None:
    n, batches = 0, []
    for size in sizes:
        batches.append(list(range(n, n + size)))
        n += size
    log = run(Doubler(), batches)
    check_order(log)
    assert [w for k, w in log if k == "out"] == [f"r{i}" for i in range(n)]


def test_lanes_keep_each_key_in_order_and_commit_when_idle() -> None:
    class Slow(Doubler):
        async def on(self, record: int) -> Outputs[str]:  # type: ignore[override]
            await asyncio.sleep(0.01 * (record % 2))  # odd keys lag behind even ones
            return super().on(record)

    log = run(Slow(), [[0, 1, 2, 3], [4, 5]], lanes=lambda r: str(r % 2))
    check_order(log)
    outs = [w for k, w in log if k == "out"]
    assert [o for o in outs if int(o[1:]) % 2 == 0] == ["r0", "r2", "r4"]
    assert [o for o in outs if int(o[1:]) % 2 == 1] == ["r1", "r3", "r5"]
    assert log[-1] == ("commit", 6)


class Timed(ListSource):
    """A ListSource that logs each poll's timeout under its name."""

    def __init__(self, name: str, batches: list[list[int]], log: Log) -> None:
        super().__init__(batches, log)
        self.name = name

    async def poll(self, timeout_ms: int) -> Sequence[int]:
        self.log.append((f"poll {self.name}", timeout_ms))
        return await super().poll(timeout_ms)

    async def commit(self) -> None:
        self.log.append((f"commit {self.name}", self.handed))


def test_merged_waits_only_on_the_last_and_commits_what_it_handed_out() -> None:
    log: Log = []
    tables, group = Timed("tables", [[], [7]], log), Timed("group", [[1, 2], [], [3]], log)
    source = merged(tables, group)

    async def go() -> list[Sequence[int]]:
        got = []
        for _ in range(3):
            got.append(await source.poll(100))
            await source.commit()
        return got

    assert asyncio.run(go()) == [[1, 2], [7], [3]]
    assert log == [
        ("poll tables", 0),
        ("poll group", 100),  # the first held nothing: wait on the last
        ("commit group", 2),
        ("poll tables", 0),
        ("poll group", 0),  # the first held a record: nothing to wait for
        ("commit tables", 1),  # only the source that handed out records
        ("poll tables", 0),
        ("poll group", 100),
        ("commit group", 3),
    ]


def test_an_awaited_tick_goes_through_the_sinks_after_the_records() -> None:
    class AsyncTick(Doubler):
        async def tick(self, now: float) -> Outputs[str]:  # type: ignore[override]
            await asyncio.sleep(0)
            return Outputs(records=["tick"])

    log = run(AsyncTick(), [[0], [1]], tick_s=0.0)
    check_order(log)
    assert [w for k, w in log if k == "out"] == ["r0", "tick", "r1", "tick"]


Rounds = list[tuple[int, int]]  # a step: per round, how many checkpoints and records


def step_of(s: int, rounds: Rounds, log: Log) -> Outputs[str]:
    """Step `s` as chained rounds: items s<step>r<round><c|r><i>, hooks logging h<step>r<round>."""
    out: Outputs[str] | None = None
    for r, (cps, recs) in enumerate(rounds):
        one = Outputs(
            [f"s{s}r{r}c{i}" for i in range(cps)],
            [f"s{s}r{r}r{i}" for i in range(recs)],
            [lambda name=f"h{s}r{r}": log.append(("hook", name))],
        )
        out = one if out is None else out.then(one)
    assert out is not None
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=4)))
def test_rounds_go_out_in_order_and_steps_keep_theirs(steps: list[Rounds]) -> None:
    """Each round's checkpoints are acknowledged before its records, its records before its hook
    and before the next round's checkpoints; steps added together keep their order in each sink
    (a key's records never overtake an earlier step's), and a step's first round shares the
    previous step's last (one round trip, not two)."""
    log: Log = []
    total: Outputs[str] = Outputs()
    for s, rounds in enumerate(steps):
        total += step_of(s, rounds, log)
    puts: list[int] = []

    class Counted(LogSink):
        async def put(self, items: Sequence[str]) -> None:
            puts.append(len(items))
            await super().put(items)

    asyncio.run(deliver(total, Counted("out", log), LogSink("ckpt", log)))
    at = {what: i for i, (_, what) in enumerate(log)}
    for s, rounds in enumerate(steps):
        for r, (cps, recs) in enumerate(rounds):
            hook = at[f"h{s}r{r}"]
            mine = [at[f"s{s}r{r}r{i}"] for i in range(recs)]
            assert all(at[f"s{s}r{r}c{i}"] < min(mine, default=hook) for i in range(cps))
            assert max(mine, default=-1) < hook
            if r + 1 < len(rounds):
                nxt = [
                    at[f"s{s}r{r + 1}{k}{i}"]
                    for k in "cr"
                    for i in range(3)
                    if f"s{s}r{r + 1}{k}{i}" in at
                ]
                assert all(hook < n for n in nxt)
    for kind in ("out", "ckpt"):
        names = [str(w) for k, w in log if k == kind]
        assert names == sorted(names, key=lambda n: (int(n[1 : n.index("r")]), n))
    assert len(puts) == sum(len(r) for r in steps) - (len(steps) - 1) if steps else puts == [0]


def test_two_single_rounds_are_one() -> None:
    one = Outputs(["c1"], ["r1"]) + Outputs(["c2"], ["r2"])
    assert (one.checkpoints, one.records, one.later) == (["c1", "c2"], ["r1", "r2"], [])
    assert not Outputs[str]() and bool(Outputs[str]().then(Outputs(records=["x"])))


def test_a_failing_hook_neither_stops_delivery_nor_the_next_round() -> None:
    log: Log = []

    def boom() -> None:
        raise RuntimeError("a metric's bug")

    out = Outputs(records=["a"], after=[boom]).then(Outputs(records=["b"]))
    asyncio.run(deliver(out, LogSink("out", log)))
    assert log == [("out", "a"), ("out", "b")]


def test_a_lock_holds_each_step_through_its_delivery() -> None:
    """What holds the lock (a rebalance hook) never sees a step answered and not delivered."""
    lock = asyncio.Lock()
    log: Log = []

    class Watched(Doubler):
        def on(self, record: int) -> Outputs[str]:
            assert lock.locked()
            log.append(("answered", record))
            return super().on(record)

    async def go() -> None:
        source = ListSource([[0], [1], [2]], log)

        async def hook() -> None:
            while source.batches:
                async with lock:
                    answered = [w for k, w in log if k == "answered"]
                    out = [w for k, w in log if k == "out"]
                    assert len(out) == len(answered), "a step answered and not delivered"
                await asyncio.sleep(0)

        checker = asyncio.create_task(hook())
        await run_core(
            Watched(), source, SlowSink("out", log), checkpoints=LogSink("ckpt", log),
            until=lambda: not source.batches, lock=lock,
        )  # fmt: skip
        await checker

    asyncio.run(go())


class SlowSink(LogSink):
    async def put(self, items: Sequence[str]) -> None:
        await asyncio.sleep(0.001)  # the hook gets its turn while a step is being delivered
        await super().put(items)
