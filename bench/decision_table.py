"""Decision quality against the reference HPA on every trace: the table of docs/simulation.md.

For every `timestamp,value` CSV in `--traces-dir` (the project ships none: ../shared/traces by
default, read their README for formats and licences) and every built-in trace (`governor
traces`), runs what `governor compare` runs — governor's default policy (or `--policy`), the
reference HPA and the perfect-foresight oracle, through `governor_tools.sim.runs.run_all` — with
C = peak / 40 and a true start-up of 60 s, and prints one line per trace:

    trace=<name> violations=<ratio> replica_hours=<ratio> events=<ratio>
        oracle_gap_closed=<x> meets=<yes|no>    (on one line)

and a summary line. Ratios are governor / HPA; 0 / 0 violation-seconds is a ratio of 0 (met).
The targets: violations ≤ 0.5, replica-hours ≤ 1.0, events ≤ 1.0. The results are
deterministic; only the run time depends on the machine.

    uv run python bench/decision_table.py [--traces-dir DIR | --held-out] [--policy P.yaml]
                                          [--only NAME] [--workers N] [--detail]
                                          [--peak-replicas 40] [--startup-seconds 60]

The issue's table is the defaults; `--peak-replicas R` (C = peak / R) and `--startup-seconds S`
replay the same traces at another capacity and start-up (docs/simulation.md, "Other capacities
and start-ups"), so a default is not judged at one setting only. The lines are the same.

`--held-out` replays, instead of the table's traces, the real series no default was tuned on
(`governor_tools.sim.traces.HELD_OUT`: the other columns and resolutions of the built-ins'
files), named `held-out:<name>` in the lines: a check that a change to the default is not
fitted to the table's ten (docs/simulation.md, "Held-out series").
"""

from __future__ import annotations

import argparse
import functools
import math
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from governor.spec import ScalingPolicySpec
from governor_tools.sim import traces
from governor_tools.sim.oracle import ORACLE
from governor_tools.sim.policies import (
    default_policy,
    load_target,
    policies_from_file,
    with_load_target,
)
from governor_tools.sim.replay import SimConfig, Summary
from governor_tools.sim.runs import HPA, run_all

DEFAULT_TRACES = Path("/work/shared/traces")  # as bench/policy_throughput.py
PEAK_REPLICAS = 40.0  # C = peak / 40
STARTUP_SECONDS = 60.0
GOVERNOR = "governor"
TARGETS = {"violations": 0.5, "replica_hours": 1.0, "events": 1.0}


def trace_names(traces_dir: Path) -> list[str]:
    files = sorted(str(p) for p in traces_dir.glob("*.csv")) if traces_dir.is_dir() else []
    return files + [traces.BUILTIN_PREFIX + b.name for b in traces.BUILTINS]


def held_out_names() -> list[str]:
    return [traces.HELD_OUT_PREFIX + b.name for b in traces.HELD_OUT]


def short_name(trace: str) -> str:
    if trace.startswith(traces.HELD_OUT_PREFIX):
        return trace  # whole: a held-out series is never taken for a row of the table
    return Path(trace.removeprefix(traces.BUILTIN_PREFIX)).stem


def ratio(ours: float, theirs: float) -> float:
    if theirs == 0:
        return 0.0 if ours == 0 else math.inf
    return ours / theirs


def policy_spec(policy: Path | None, config: SimConfig) -> ScalingPolicySpec:
    if policy is None:
        return default_policy(config).spec
    (found,) = policies_from_file(policy)
    return with_load_target(found, load_target(config)).spec


def run_trace(
    trace: str,
    policy: Path | None,
    peak_replicas: float = PEAK_REPLICAS,
    startup_seconds: float = STARTUP_SECONDS,
) -> dict[str, object]:
    load = traces.load(trace)
    config = SimConfig(
        capacity_per_replica=load.peak / peak_replicas, startup_seconds=startup_seconds
    )
    runs = run_all(load, config, {GOVERNOR: policy_spec(policy, config)}, with_hpa=True)
    by: dict[str, Summary] = {r.name: r.summary for r in runs}
    ours, hpa = by[GOVERNOR], by[HPA]
    ratios = {
        "violations": ratio(ours.violation_seconds, hpa.violation_seconds),
        "replica_hours": ratio(ours.replica_hours, hpa.replica_hours),
        "events": ratio(ours.scale_events, hpa.scale_events),
    }
    return {
        "trace": short_name(trace),
        "capacity": config.capacity_per_replica,
        "ratios": ratios,
        "gap": ours.oracle_gap_closed,
        "meets": all(ratios[k] <= TARGETS[k] + 1e-12 for k in TARGETS),
        "summaries": {name: by[name] for name in (GOVERNOR, HPA, ORACLE)},
    }


def line(row: dict[str, object]) -> str:
    r = row["ratios"]
    assert isinstance(r, dict)
    gap = row["gap"]
    gap_text = "n/a" if gap is None else f"{gap:.2f}"
    return (
        f"trace={row['trace']} violations={r['violations']:.2f}"
        f" replica_hours={r['replica_hours']:.3f} events={r['events']:.2f}"
        f" oracle_gap_closed={gap_text} meets={'yes' if row['meets'] else 'no'}"
    )


def detail(row: dict[str, object]) -> str:
    s = row["summaries"]
    assert isinstance(s, dict)
    g, h, o = s[GOVERNOR], s[HPA], s[ORACLE]
    return (
        f"  C={row['capacity']:.4g} violation_s {g.violation_seconds}/{h.violation_seconds}"
        f" replica_h {g.replica_hours:.1f}/{h.replica_hours:.1f}/{o.replica_hours:.1f}"
        f" events {g.scale_events}/{h.scale_events}"
    )


def show(row: dict[str, object], with_detail: bool) -> None:
    print(line(row), flush=True)
    if with_detail:
        print(detail(row), flush=True)


def summary(rows: list[dict[str, object]]) -> str:
    met = {k: 0 for k in TARGETS}
    for row in rows:
        r = row["ratios"]
        assert isinstance(r, dict)
        for k in TARGETS:
            met[k] += r[k] <= TARGETS[k] + 1e-12
    gaps = [g for row in rows if isinstance(g := row["gap"], float)]
    worst = min(gaps) if gaps else math.nan
    return (
        f"summary traces={len(rows)} meets_all={sum(bool(r['meets']) for r in rows)}"
        f" violations_met={met['violations']} replica_hours_met={met['replica_hours']}"
        f" events_met={met['events']} min_oracle_gap_closed={worst:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces-dir", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--policy", type=Path, help="a ScalingPolicy YAML (default: governor's)")
    parser.add_argument("--only", action="append", help="run only traces whose name has this")
    parser.add_argument("--detail", action="store_true", help="also print the raw numbers")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes (default 1: the machine is shared; more only when the load is low)",
    )
    parser.add_argument(
        "--peak-replicas",
        type=float,
        default=PEAK_REPLICAS,
        help=f"C = peak / this (default {PEAK_REPLICAS:g})",
    )
    parser.add_argument(
        "--startup-seconds",
        type=float,
        default=STARTUP_SECONDS,
        help=f"the replicas' true start-up (default {STARTUP_SECONDS:g})",
    )
    parser.add_argument(
        "--held-out",
        action="store_true",
        help="replay the held-out series (traces.HELD_OUT) instead of the table's traces",
    )
    args = parser.parse_args()
    if not args.peak_replicas > 0 or not args.startup_seconds >= 0:
        parser.error("--peak-replicas must be > 0 and --startup-seconds >= 0")
    one = functools.partial(
        run_trace,
        policy=args.policy,
        peak_replicas=args.peak_replicas,
        startup_seconds=args.startup_seconds,
    )
    names = held_out_names() if args.held_out else trace_names(args.traces_dir)
    if args.only:
        names = [n for n in names if any(o in short_name(n) for o in args.only)]
    if args.workers > 1:
        load1 = os.getloadavg()[0]
        print(f"# workers={args.workers} load_average={load1:.2f}")
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(one, names))
    else:
        rows = []
        for n in names:
            rows.append(one(n))
            show(rows[-1], args.detail)
    if args.workers > 1:
        for row in rows:
            show(row, args.detail)
    print(summary(rows))


if __name__ == "__main__":
    main()
