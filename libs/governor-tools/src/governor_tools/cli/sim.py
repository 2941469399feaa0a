"""`governor simulate | compare | traces`: replay a load trace through governor and the HPA."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from governor.entry import CommandError, Commands
from governor.spec import PolicyError, ScalingPolicySpec
from governor_tools.sim import report, traces
from governor_tools.sim.oracle import ORACLE
from governor_tools.sim.policies import default_policy, policies_from_file
from governor_tools.sim.replay import SimConfig, SimError, Summary
from governor_tools.sim.runs import HPA, run_all, write_outputs

GOVERNOR = "governor"
HPA_NOTE = (
    "hpa: the reference autoscaling/v2 HPA with default behavior, 15 s sync, External "
    "AverageValue target utilization × C per pod, seeing the 15 s mean load one scrape (15 s) late"
)
ORACLE_NOTE = (
    "oracle: the least replica-hours with zero violation seconds, knowing the whole trace and the "
    "true start-up; oracle_gap_closed: (hpa − policy) / (hpa − oracle) replica-hours"
)
SCORE_NOTE = (
    "violation_seconds: seconds with load > ready × C; unserved_fraction: "
    "Σ max(0, load − ready × C) / Σ load; replica_hours: Σ requested × step / 3600; "
    "replicas serve start-up seconds after they are requested"
)


def _config(capacity: float, startup: float, utilization: float, step: float) -> SimConfig:
    try:
        return SimConfig(
            capacity_per_replica=capacity,
            startup_seconds=startup,
            target_utilization=utilization,
            step_seconds=step,
        )
    except SimError as err:
        raise CommandError(str(err)) from None


def _print_table(summaries: dict[str, Summary]) -> None:
    table = Table("policy", *report.SUMMARY_COLUMNS)
    for row in report.table_rows(summaries):
        table.add_row(*row)
    Console(width=max(Console().width, 110)).print(table)


def _fail(err: Exception) -> SystemExit:
    print(f"error: {err}", file=sys.stderr)
    return SystemExit(2)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "policy"


_TRACE_HELP = "a CSV with header `timestamp,value` or a built-in name (see `governor traces`)"
_C_HELP = "the load one replica serves (C)"


def simulate(args: argparse.Namespace) -> None:
    """Replay TRACE through governor's policy (and the reference HPA) and report."""
    baseline, policy, out = args.baseline, args.policy, args.out
    if baseline not in (None, HPA):
        raise CommandError(f"only `--baseline {HPA}` is known, got {baseline!r}", "--baseline")
    config = _config(args.capacity, args.startup_seconds, args.target_utilization, args.step)
    try:
        load = traces.load(args.trace)
        if policy is None:
            spec = default_policy(config).spec
        else:
            found = policies_from_file(policy)
            if len(found) != 1:
                raise SimError(
                    f"{policy}: {len(found)} policies; simulate takes one (use `compare`)"
                )
            spec = found[0].spec
        runs = run_all(load, config, {GOVERNOR: spec}, with_hpa=baseline == HPA)
    except (traces.TraceError, SimError, PolicyError) as err:
        raise _fail(err) from None
    csv_names = {
        GOVERNOR: "replicas.csv",
        HPA: "baseline_replicas.csv",
        ORACLE: "oracle_replicas.csv",
    }
    notes = [
        "governor: " + ("the default policy" if policy is None else str(policy)),
        *([HPA_NOTE] if baseline == HPA else []),
        ORACLE_NOTE,
        SCORE_NOTE,
    ]
    for path in write_outputs(runs, load, config, out, csv_names, notes):
        print(str(path))
    _print_table({r.name: r.summary for r in runs})


def compare(args: argparse.Namespace) -> None:
    """N policies on the same trace, plus the reference HPA: one table, one chart."""
    policy, out = args.policy, args.out
    config = _config(args.capacity, args.startup_seconds, args.target_utilization, args.step)
    try:
        load = traces.load(args.trace)
        specs: dict[str, ScalingPolicySpec] = {}
        if not policy:
            specs[GOVERNOR] = default_policy(config).spec
        for path in policy:
            for p in policies_from_file(path):
                name = p.metadata.name
                if name in specs or name in (HPA, ORACLE):
                    name = f"{path.stem}/{name}"
                specs[name] = p.spec
        runs = run_all(load, config, specs, with_hpa=True)
    except (traces.TraceError, SimError, PolicyError) as err:
        raise _fail(err) from None
    csv_names = {r.name: f"{_slug(r.name)}_replicas.csv" for r in runs}
    for path in write_outputs(
        runs, load, config, out, csv_names, [HPA_NOTE, ORACLE_NOTE, SCORE_NOTE]
    ):
        print(str(path))
    _print_table({r.name: r.summary for r in runs})


def list_traces(args: argparse.Namespace) -> None:
    """The built-in real traces (use as `builtin:<name>`) and the held-out series (`held-out:`)."""
    console = Console()
    for title, prefix, series in (
        ("built-in traces", traces.BUILTIN_PREFIX, traces.BUILTINS),
        ("held-out series (no default was tuned on them)", traces.HELD_OUT_PREFIX, traces.HELD_OUT),
    ):
        table = Table(title=title)
        table.add_column("name", no_wrap=True)
        for column in ("source", "step", "rows", "licence"):
            table.add_column(column)
        for b in series:
            t = traces.load_series(b, prefix)
            table.add_row(prefix + b.name, b.source, f"{b.step:g} s", str(len(t.values)), b.licence)
        console.print(table)
    print(
        "Timestamps are synthesized (row i at i × step s): the files carry none. "
        "Synthetic samples shipped in the same package are not offered."
    )


def _run_options(p: argparse.ArgumentParser) -> None:
    """The trace and the run's settings, which simulate and compare share."""
    p.add_argument("trace", metavar="TRACE", help=_TRACE_HELP)
    p.add_argument(
        "--capacity-per-replica", dest="capacity", type=float, required=True, help=_C_HELP
    )
    p.add_argument("--startup-seconds", type=float, default=60.0, help="(default: 60)")
    p.add_argument("--target-utilization", type=float, default=0.7, help="(default: 0.7)")
    p.add_argument(
        "--step", type=float, default=15.0, help="governor's decision period, seconds (default: 15)"
    )
    p.add_argument("--out", type=Path, required=True, help="output folder")


def register(commands: Commands) -> None:
    p = commands.command("simulate", simulate)
    _run_options(p)
    p.add_argument(
        "--policy", type=Path, help="a ScalingPolicy YAML (default: governor's default policy)"
    )
    p.add_argument("--baseline", help="`hpa`: the reference HPA")
    p = commands.command("compare", compare)
    _run_options(p)
    p.add_argument(
        "--policy",
        type=Path,
        action="append",
        default=[],
        help="a ScalingPolicy YAML; repeat (default: governor's default)",
    )
    commands.command("traces", list_traces)
