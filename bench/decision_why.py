"""Why a trace misses a target of `bench/decision_table.py`: governor against the reference HPA,
step by step, attributed to the rule that bound each of governor's decisions.

For each trace (same C = peak / 40 and start-up 60 s as the table, or the table's other
settings and its held-out series with the same options), replays governor's policy
(or `--policy`) and the reference HPA, both at a 15 s step, and pairs their rows by timestamp.
Every governor row is labelled by its `bound_by` rule; an `event_reduction` row by the first
words of its reason with the numbers taken out ("scale-down by merges", "scale-down to waits"),
so the sub-rules of event reduction are told apart. Prints, per label:

    label  steps  above_h  below_h  ups  downs  violation_steps

above_h / below_h: replica-hours governor requested above / below HPA on those rows; ups / downs:
scale events governor made on them; violation_steps: rows whose load exceeded governor's ready
capacity (the table's violation seconds are per second; a row is a 15 s sample of them). Then
the totals and HPA's own ups, downs and violation rows. Deterministic; a read of the decisions,
not a timing. `--changes` also prints every row where either count changes (hour, load in
replicas at the target, both counts, governor's rule, and whether the row violated): the
replicas over time behind the sums.

    uv run python bench/decision_why.py [--policy P.yaml] [--traces-dir DIR | --held-out]
                                        [--peak-replicas 40] [--startup-seconds 60]
                                        [--changes] NAME [...]
"""

from __future__ import annotations

import argparse
import collections
from dataclasses import dataclass, field
from pathlib import Path

# bench/ is on sys.path when this runs as a script: the table's trace list, C and policy.
import decision_table as table

from governor.policy import evaluate as policy_evaluate
from governor.policy.types import ScaleInputs, ScaleResult, ScaleState
from governor.spec import ScalingPolicySpec
from governor_tools.sim import traces
from governor_tools.sim.replay import Run, SimConfig, replay
from governor_tools.sim.runs import run_hpa

STEP_HOURS = 15.0 / 3600.0
# The target utilization the table replays at (SimConfig's default): a replica's load at the target.
UTILIZATION = SimConfig(capacity_per_replica=1.0).target_utilization


def label(result: ScaleResult) -> str:
    """The rule that bound a decision; event reduction's sub-rule by its reason's first words."""
    if result.bound_by != "event_reduction":
        return result.bound_by
    for reason in result.reasons:
        if reason.rule == "event_reduction":
            head = reason.detail.split(":")[0]
            words = [w for w in head.split() if not w.rstrip(",").isdigit()]
            return "er: " + " ".join(words[:5])
    return "event_reduction"


@dataclass
class Row:
    steps: int = 0
    above: float = 0.0
    below: float = 0.0
    ups: int = 0
    downs: int = 0
    violations: int = 0


@dataclass
class Attribution:
    rows: dict[str, Row] = field(default_factory=lambda: collections.defaultdict(Row))
    hpa_ups: int = 0
    hpa_downs: int = 0
    hpa_violations: int = 0


def replays(
    trace: str,
    policy: Path | None,
    peak_replicas: float = table.PEAK_REPLICAS,
    startup_seconds: float = table.STARTUP_SECONDS,
) -> tuple[Run, Run, dict[float, str], float]:
    """governor's and HPA's runs of one trace, governor's labels by timestamp, and C."""
    load = traces.load(trace)
    config = SimConfig(
        capacity_per_replica=load.peak / peak_replicas, startup_seconds=startup_seconds
    )
    spec: ScalingPolicySpec = table.policy_spec(policy, config)
    labels: dict[float, str] = {}

    def labelled(
        p: ScalingPolicySpec, i: ScaleInputs, s: ScaleState, now: float, **kw: float
    ) -> tuple[ScaleResult, ScaleState]:
        result, state = policy_evaluate(p, i, s, now, **kw)
        labels[now] = label(result)
        return result, state

    ours = replay(table.GOVERNOR, load, spec, config, evaluate=labelled)
    hpa = run_hpa(load, config, policy_evaluate)
    return ours, hpa, labels, config.capacity_per_replica


def attribute(ours: Run, hpa: Run, labels: dict[float, str], capacity: float) -> Attribution:
    out = Attribution()
    theirs = {r.timestamp: r for r in hpa.rows}
    previous = None
    for r in ours.rows:
        row = out.rows[labels.get(r.timestamp, "none")]
        row.steps += 1
        other = theirs.get(r.timestamp)
        if other is not None:
            diff = (r.replicas_requested - other.replicas_requested) * STEP_HOURS
            row.above += max(diff, 0.0)
            row.below += max(-diff, 0.0)
        if previous is not None and r.replicas_requested != previous:
            row.ups += r.replicas_requested > previous
            row.downs += r.replicas_requested < previous
        row.violations += r.load > r.replicas_ready * capacity
        previous = r.replicas_requested
    previous = None
    for r in hpa.rows:
        if previous is not None and r.replicas_requested != previous:
            out.hpa_ups += r.replicas_requested > previous
            out.hpa_downs += r.replicas_requested < previous
        out.hpa_violations += r.load > r.replicas_ready * capacity
        previous = r.replicas_requested
    return out


def show(name: str, a: Attribution) -> None:
    print(f"trace={name}")
    print(f"  {'label':34s} {'steps':>7s} {'above_h':>9s} {'below_h':>9s} {'ups':>5s} {'downs':>5s}"
          f" {'viol':>5s}")  # fmt: skip
    total = Row()
    for key, row in sorted(a.rows.items(), key=lambda kv: kv[1].below - kv[1].above):
        print(f"  {key:34s} {row.steps:7d} {row.above:9.1f} {row.below:9.1f} {row.ups:5d}"
              f" {row.downs:5d} {row.violations:5d}")  # fmt: skip
        total.steps += row.steps
        total.above += row.above
        total.below += row.below
        total.ups += row.ups
        total.downs += row.downs
        total.violations += row.violations
    net = total.above - total.below
    print(f"  {'total':34s} {total.steps:7d} {total.above:9.1f} {total.below:9.1f} {total.ups:5d}"
          f" {total.downs:5d} {total.violations:5d}   net {net:+.1f} h")  # fmt: skip
    print(f"  {'hpa':34s} {'':7s} {'':9s} {'':9s} {a.hpa_ups:5d} {a.hpa_downs:5d}"
          f" {a.hpa_violations:5d}")  # fmt: skip


def changes(ours: Run, hpa: Run, labels: dict[float, str], capacity: float, unit: float) -> None:
    """Each row where governor's or HPA's requested count changes: the hour into the trace, the
    load in replicas at the target (`unit` = u × C), both counts and the rule that bound
    governor's row: the replicas over time, where the table only sums them."""
    theirs = {r.timestamp: r for r in hpa.rows}
    start = ours.rows[0].timestamp if ours.rows else 0.0
    mine = theirs_before = None
    for r in ours.rows:
        other = theirs.get(r.timestamp)
        hpa_now = other.replicas_requested if other is not None else theirs_before
        if mine is not None and (r.replicas_requested != mine or hpa_now != theirs_before):
            print(f"  t={(r.timestamp - start) / 3600:8.3f}h load={r.load / unit:8.2f}"
                  f" governor {mine}->{r.replicas_requested} ({labels.get(r.timestamp, 'none')})"
                  f" hpa {theirs_before}->{hpa_now}"
                  f"{' violation' if r.load > r.replicas_ready * capacity else ''}")  # fmt: skip
        mine, theirs_before = r.replicas_requested, hpa_now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", help="traces whose short name contains this")
    parser.add_argument("--traces-dir", type=Path, default=table.DEFAULT_TRACES)
    parser.add_argument("--policy", type=Path, help="a ScalingPolicy YAML (default: governor's)")
    parser.add_argument("--held-out", action="store_true", help="the held-out series instead")
    parser.add_argument("--peak-replicas", type=float, default=table.PEAK_REPLICAS)
    parser.add_argument("--startup-seconds", type=float, default=table.STARTUP_SECONDS)
    parser.add_argument(
        "--changes", action="store_true", help="also every row where either count changes"
    )
    args = parser.parse_args()
    names = table.held_out_names() if args.held_out else table.trace_names(args.traces_dir)
    for trace in names:
        name = table.short_name(trace)
        if any(n in name for n in args.names):
            runs = replays(trace, args.policy, args.peak_replicas, args.startup_seconds)
            show(name, attribute(*runs))
            if args.changes:
                ours, hpa, labels, capacity = runs
                changes(ours, hpa, labels, capacity, capacity * UTILIZATION)


if __name__ == "__main__":
    main()
