"""Why did it scale? One workload's decisions with their inputs, what the actuator did and what
the cluster says, as `governor explain` prints them. Pure: records in, an Explanation out, and
its text; the CLI (governor/cli/explain.py) reads Kafka and the API server.

A decision is matched to its actuations by decision id (the last one wins: a failed attempt
then an applied retry reads "applied"), to the newest recommendation for its workload computed
no later than the decision (ready replicas, floor, bounds, what the pool asked for), and to the
Events whose message names its decision id.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping

import msgspec

from governor.events import Actuation, MetricInput, Reason, Recommendation, ScaleDecision
from governor.policy.actuation import ANNOTATION_PREFIX

# No actuation record (yet): the actuator has not handled it, or is not running.
PENDING = "pending"


class ClusterEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A Kubernetes Event about the workload (core/v1 fields)."""

    at: str  # lastTimestamp, eventTime or creation time, as the API server gives it
    type: str
    reason: str
    message: str
    count: int = 1


class Stage1(msgspec.Struct, kw_only=True):
    """What the per-workload stage saw and wanted (the Recommendation)."""

    desired: int
    current: int
    ready: int
    floor: int
    min_replicas: int
    max_replicas: int
    pool: str


class Explained(msgspec.Struct, kw_only=True):
    decision_id: str
    seq: int
    at: float
    from_replicas: int
    to_replicas: int
    bound_by: str  # the rule that had the last word
    reasons: list[Reason]
    inputs: list[MetricInput]
    outcome: str  # an ActuationOutcome, or "pending"
    outcome_reason: str = ""
    outcome_at: float | None = None
    stage1: Stage1 | None = None
    events: list[ClusterEvent] = msgspec.field(default_factory=list)


class Explanation(msgspec.Struct, kw_only=True):
    workload: str
    decisions: list[Explained]
    annotations: dict[str, str] = msgspec.field(default_factory=dict)
    # The newest Events that name no decision on the topics (another controller's, a refusal
    # before any decision, ...).
    other_events: list[ClusterEvent] = msgspec.field(default_factory=list)


def bound_by(reasons: list[Reason]) -> str:
    """The rule that bound the decision: the last one applied (the policy appends in order:
    metric, then tolerance/stabilization/rate limits/bounds, then the pool's capacity)."""
    return reasons[-1].rule if reasons else "unknown"


def governor_annotations(obj_annotations: Mapping[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (obj_annotations or {}).items() if k.startswith(ANNOTATION_PREFIX)}


def _stage1(rec: Recommendation) -> Stage1:
    return Stage1(
        desired=rec.desired,
        current=rec.current,
        ready=rec.ready,
        floor=rec.floor,
        min_replicas=rec.min_replicas,
        max_replicas=rec.max_replicas,
        pool=rec.pool,
    )


def explain(
    workload: str,
    decisions: Iterable[ScaleDecision],
    actuations: Iterable[Actuation] = (),
    recommendations: Iterable[Recommendation] = (),
    *,
    annotations: Mapping[str, str] | None = None,
    events: Iterable[ClusterEvent] = (),
    last: int = 10,
) -> Explanation:
    """The last `last` decisions for `workload` (oldest first), each with its outcome."""
    by_id: dict[str, ScaleDecision] = {}
    for d in decisions:
        if d.workload == workload:
            by_id[d.decision_id] = d
    shown = sorted(by_id.values(), key=lambda d: (d.seq, d.decided_at))[-last:] if last else []
    outcome: dict[str, Actuation] = {}
    for a in sorted((a for a in actuations if a.workload == workload), key=lambda a: a.at):
        outcome[a.decision_id] = a
    recs = sorted(
        (r for r in recommendations if r.workload == workload), key=lambda r: r.computed_at
    )
    events = list(events)
    # Events about decisions older than the ones shown are left out with them.
    older = {d.decision_id for d in by_id.values()} - {d.decision_id for d in shown}
    used = {i for i, e in enumerate(events) if any(o in e.message for o in older)}
    out: list[Explained] = []
    for d in shown:
        act = outcome.get(d.decision_id)
        before = [r for r in recs if r.computed_at <= d.decided_at]
        mine = [i for i, e in enumerate(events) if d.decision_id in e.message]
        used.update(mine)
        out.append(
            Explained(
                decision_id=d.decision_id,
                seq=d.seq,
                at=d.decided_at,
                from_replicas=d.from_replicas,
                to_replicas=d.to_replicas,
                bound_by=bound_by(d.reasons),
                reasons=d.reasons,
                inputs=d.inputs,
                outcome=act.outcome if act else PENDING,
                outcome_reason=act.reason if act else "",
                outcome_at=act.at if act else None,
                stage1=_stage1(before[-1]) if before else None,
                events=[events[i] for i in mine],
            )
        )
    return Explanation(
        workload=workload,
        decisions=out,
        annotations=governor_annotations(annotations),
        other_events=[e for i, e in enumerate(events) if i not in used][-last:] if last else [],
    )


# --- text -------------------------------------------------------------------------------------


def _time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def _reason(r: Reason) -> str:
    parts: list[str] = [r.rule]
    if r.metric:
        parts.append(f"{r.metric}={_num(r.value)}" if r.value is not None else r.metric)
    elif r.value is not None:
        parts.append(_num(r.value))
    text = " ".join(parts)
    return f"{text}: {r.detail}" if r.detail else text


def _input(i: MetricInput) -> str:
    text = f"{i.metric}={_num(i.value)} (target {i.target:g} {i.target_type}"
    if i.desired is not None:
        text += f", wants {i.desired}"
    if i.newest_sample is not None:
        text += f", newest sample {_time(i.newest_sample)}"
    if i.stale:
        text += ", STALE"
    return text + ")"


def render_entry(e: Explained) -> list[str]:
    head = f"{_time(e.at)}  seq {e.seq}  {e.from_replicas} -> {e.to_replicas}  {e.outcome}"
    if e.outcome_reason and e.outcome != "applied":  # applied: its reason is the rules below
        head += f" ({e.outcome_reason})"
    lines = [head, f"  bound by: {e.bound_by}", f"  decision: {e.decision_id}"]
    lines += [f"  rule:     {_reason(r)}" for r in e.reasons]
    lines += [f"  input:    {_input(i)}" for i in e.inputs]
    if e.stage1 is not None:
        s = e.stage1
        lines.append(
            f"  workload: ready {s.ready}/{s.current}, wanted {s.desired}, floor {s.floor}, "
            f"bounds [{s.min_replicas}, {s.max_replicas}], pool {s.pool}"
        )
    if e.outcome_at is not None:
        lines.append(f"  actuator: {e.outcome} at {_time(e.outcome_at)}")
    lines += [f"  event:    {ev.type} {ev.reason}: {ev.message}" for ev in e.events]
    return lines


def render(x: Explanation) -> str:
    n = len(x.decisions)
    lines = [f"{x.workload}: {n} decision{'' if n == 1 else 's'} (oldest first)"]
    if not x.decisions:
        lines.append("  none on the decisions topic (is there a ScalingPolicy for it?)")
    for e in x.decisions:
        lines.append("")
        lines += render_entry(e)
    if x.annotations:
        lines += ["", "annotations on the object:"]
        lines += [f"  {k}: {v}" for k, v in sorted(x.annotations.items())]
    if x.other_events:
        lines += ["", "other events:"]
        lines += [f"  {e.at} {e.type} {e.reason}: {e.message}" for e in x.other_events]
    return "\n".join(lines)
