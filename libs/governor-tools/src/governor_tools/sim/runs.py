"""Running several policies on one trace and writing what `simulate` and `compare` promise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

from governor.cores.decider import Evaluate
from governor.spec import ScalingPolicySpec
from governor_tools.sim import report
from governor_tools.sim.oracle import ORACLE, gap_closed, run_oracle
from governor_tools.sim.policies import HPA_PIPELINE, HPA_SYNC_SECONDS, hpa_policy
from governor_tools.sim.replay import Run, SimConfig, replay
from governor_tools.sim.traces import Trace

HPA = "hpa"


def policy_evaluate() -> Evaluate:
    """The one decision function the services run."""
    from governor.policy import evaluate

    return evaluate


def run_hpa(trace: Trace, config: SimConfig, evaluate: Evaluate) -> Run:
    """The reference HPA: fixed 15 s sync whatever the decision step of the others."""
    return replay(
        HPA,
        trace,
        hpa_policy(config),
        config,
        evaluate=evaluate,
        pipeline=HPA_PIPELINE,
        step_seconds=HPA_SYNC_SECONDS,
    )


def run_all(
    trace: Trace,
    config: SimConfig,
    policies: Mapping[str, ScalingPolicySpec],
    *,
    with_hpa: bool,
    evaluate: Evaluate | None = None,
) -> list[Run]:
    evaluate = evaluate or policy_evaluate()
    runs = [replay(name, trace, spec, config, evaluate=evaluate) for name, spec in policies.items()]
    if with_hpa:
        runs.append(run_hpa(trace, config, evaluate))
    runs.append(run_oracle(trace, config))
    return with_gap_closed(runs)


def with_gap_closed(runs: list[Run]) -> list[Run]:
    """Each policy's share of HPA's replica-hour gap to the oracle, when both ran."""
    by_name = {r.name: r.summary for r in runs}
    if HPA not in by_name or ORACLE not in by_name:
        return runs
    hpa, oracle = by_name[HPA].replica_hours, by_name[ORACLE].replica_hours
    return [
        r
        if r.name in (HPA, ORACLE)
        else msgspec.structs.replace(
            r,
            summary=msgspec.structs.replace(
                r.summary, oracle_gap_closed=gap_closed(r.summary.replica_hours, hpa, oracle)
            ),
        )
        for r in runs
    ]


def write_outputs(
    runs: Sequence[Run],
    trace: Trace,
    config: SimConfig,
    out: Path,
    csv_names: Mapping[str, str],
    notes: Sequence[str] = (),
) -> list[Path]:
    """CSV per run (named by `csv_names`), summary.json, report.png, report.html."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for run in runs:
        path = out / csv_names[run.name]
        report.write_rows(run, path)
        written.append(path)
    summaries = {run.name: run.summary for run in runs}
    report.write_summary(summaries, out / "summary.json")
    title = f"{trace.name}: " + " vs ".join(run.name for run in runs)
    report.chart(runs, trace, config, title, out / "report.png")
    report.write_html(summaries, out / "report.png", out / "report.html", title, config, notes)
    written += [out / "summary.json", out / "report.png", out / "report.html"]
    return written
