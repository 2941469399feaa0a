"""`governor ab WORKLOAD [--since DURATION]`: the Active policy against its Shadow policies on the
live traffic Kafka holds. Reads governor.load, governor.decisions, governor.shadow-decisions and
governor.workloads from the beginning; governor_tools.ab scores the arms."""

from __future__ import annotations

import argparse
import asyncio
import html
import re
import time
from collections import Counter
from pathlib import Path

from governor import events
from governor.entry import CommandError, Commands
from governor.history import History
from governor.windows import views
from governor_tools import ab
from governor_tools.cli.explain import parse_workload
from governor_tools.cli.options import bootstrap_option

TOPICS = (events.LOAD, events.DECISIONS, events.SHADOW_DECISIONS, events.WORKLOADS)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise CommandError(f"{text!r}: a duration like 90s, 30m, 2h", "--since")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


class Records:
    def __init__(self, workload: str, since: float) -> None:
        self.workload, self.since = workload, since
        self.load: dict[str, list[tuple[float, float]]] = {}
        self.arms: dict[str, list[tuple[float, int]]] = {}
        self.active = ""
        self.first_from: int | None = None
        self.states: list[events.WorkloadState] = []

    def add(self, value: object, topic: str) -> None:
        if getattr(value, "workload", None) != self.workload:
            return
        if isinstance(value, events.LoadWindow):
            for w in views(value):  # one message per series carries several windows
                if w.window == "stable" and w.end >= self.since:
                    # a per-pod series' load is its per-instant total over the pods
                    load = w.total_mean if w.instants else w.mean
                    self.load.setdefault(w.metric, []).append((w.end, load))
        elif isinstance(value, events.ScaleDecision):
            if value.decided_at < self.since:
                return
            name = value.policy or "active"
            if topic == events.DECISIONS.name:  # the Active policy's; shadows have their topic
                self.active = name
                if self.first_from is None:
                    self.first_from = value.from_replicas
            self.arms.setdefault(name, []).append((value.decided_at, value.to_replicas))
        elif isinstance(value, events.WorkloadState):
            self.states.append(value)


def _report(c: ab.Comparison, lines: list[str], out: Path, workload: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(10, 4))
    for arm in c.arms:
        ax.step(range(len(arm.series)), [r for _, r in arm.series], where="post",
                label=f"{arm.name} (ready)")  # fmt: skip
    ax.set_xlabel(f"seconds since {time.strftime('%H:%M:%S', time.gmtime(c.start))} UTC")
    ax.set_ylabel("replicas")
    ax.set_title(f"{workload}: Active vs Shadow")
    ax.legend()
    fig.savefig(out / "ab.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    body = "".join(f"<p>{html.escape(x)}</p>" for x in lines)
    (out / "ab.html").write_text(
        f"<!doctype html><title>governor ab {html.escape(workload)}</title>"
        f"<h1>{html.escape(workload)}</h1><pre>{html.escape(ab.table(c))}</pre>{body}"
        '<img src="ab.png" alt="replicas per arm">'
    )


async def _read(workload: str, since: float, bootstrap: str | None) -> Records:
    records = Records(workload, since)
    async with History(bootstrap, TOPICS) as history:
        for m in await history.read_to_end():
            records.add(m.value, m.topic)
    return records


def ab_cmd(args: argparse.Namespace) -> None:
    """Score the Active policy and each Shadow policy of WORKLOAD on the same load:
    violation-seconds, replica-hours and scale events with 95 % bootstrap intervals."""
    workload, since, capacity, out = args.workload, args.since, args.capacity, args.out
    parse_workload(workload)
    now = time.time()
    r = asyncio.run(_read(workload, now - parse_duration(since), args.bootstrap))
    if not r.load:
        raise CommandError(f"no load windows of {workload} since {since}")
    name = args.metric or Counter({k: len(v) for k, v in r.load.items()}).most_common(1)[0][0]
    load = sorted(r.load[name])
    if not r.active:
        raise CommandError(f"no decision of {workload}'s Active policy since {since}")
    arms = [ab.Arm(r.active, r.arms.pop(r.active))]
    arms += [ab.Arm(k, v) for k, v in sorted(r.arms.items())]
    start, end = load[0][0], max(load[-1][0], now)
    startup = args.startup if args.startup is not None else ab.startup_from_states(r.states)
    c = ab.compare(
        load, arms, initial_replicas=r.first_from or 1, start=start, end=end,
        capacity_per_replica=capacity, startup_seconds=startup, seed=args.seed,
    )  # fmt: skip
    lines = ab.verdict(c)
    print(f"{workload}, metric {name}, {end - start:.0f} s, start-up "
          f"{c.startup_seconds:.0f} s, C = {capacity:g}")  # fmt: skip
    print(ab.table(c))
    for line in lines:
        print(line)
    _report(c, lines, out, workload)
    print(f"report: {out / 'ab.html'}")


def register(commands: Commands) -> None:
    p = commands.command("ab", ab_cmd)
    p.add_argument(
        "workload", metavar="WORKLOAD", help="namespace/kind/name, e.g. shop/Deployment/web"
    )
    p.add_argument("--since", default="1h", help="how far back, e.g. 30m, 2h (default: 1h)")
    p.add_argument(
        "--capacity-per-replica",
        dest="capacity",
        type=float,
        required=True,
        help="load one replica serves (violation: load > C×ready)",
    )
    p.add_argument("--metric", default="", help="the load metric (default: the most seen)")
    p.add_argument(
        "--startup-seconds",
        dest="startup",
        type=float,
        help="pod start-up (default: measured from governor.workloads)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("out/ab"),
        help="ab.html and ab.png go here (default: %(default)s)",
    )
    bootstrap_option(p, "Kafka bootstrap")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed (default: 0)")
