"""`governor explain WORKLOAD`: why did it scale? (also `kubectl governor explain`, through the
`kubectl-governor` plugin on PATH). Reads governor.decisions, governor.actuations and
governor.recommendations from the beginning and, with a cluster, the object's governor.dev/*
annotations and its Events; governor.explain decides what to show."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from governor import events
from governor.bus import Message
from governor.entry import CommandError, Commands
from governor.explain import ClusterEvent, Explanation, explain, render, render_entry
from governor.history import History
from governor_tools.cli.options import bootstrap_option

TOPICS = (events.DECISIONS, events.ACTUATIONS, events.RECOMMENDATIONS)
KINDS = {  # the target kinds governor scales: kind -> (apiVersion, plural)
    "Deployment": ("apps/v1", "deployments"),
    "StatefulSet": ("apps/v1", "statefulsets"),
    "Job": ("batch.volcano.sh/v1alpha1", "jobs"),
    "PyTorchJob": ("kubeflow.org/v1", "pytorchjobs"),
}


class Records(msgspec.Struct):
    """One workload's records (the topics hold every workload's: only its own are kept)."""

    workload: str
    decisions: list[events.ScaleDecision] = msgspec.field(default_factory=list)
    actuations: list[events.Actuation] = msgspec.field(default_factory=list)
    recommendations: list[events.Recommendation] = msgspec.field(default_factory=list)

    def add(self, batch: Sequence[Message[Any]]) -> None:
        for m in batch:
            v = m.value
            if v is None or v.workload != self.workload:
                continue
            if isinstance(v, events.ScaleDecision):
                self.decisions.append(v)
            elif isinstance(v, events.Actuation):
                self.actuations.append(v)
            elif isinstance(v, events.Recommendation):
                self.recommendations.append(v)


def parse_workload(workload: str) -> tuple[str, str, str]:
    parts = workload.split("/")
    if len(parts) != 3 or not all(parts):
        raise CommandError(
            f"{workload!r} is not namespace/kind/name (e.g. shop/Deployment/web)", "WORKLOAD"
        )
    return parts[0], parts[1], parts[2]


def _event(e: dict[str, Any]) -> ClusterEvent:
    meta = e.get("metadata") or {}
    at = e.get("lastTimestamp") or e.get("eventTime") or meta.get("creationTimestamp") or ""
    return ClusterEvent(
        at=str(at),
        type=str(e.get("type") or ""),
        reason=str(e.get("reason") or ""),
        message=str(e.get("message") or ""),
        count=int(e.get("count") or 1),
    )


async def read_cluster(
    kubeconfig: Path, workload: str
) -> tuple[dict[str, str], list[ClusterEvent], str]:
    """The object's annotations and Events (oldest first), or why they could not be read."""
    from governor.kube import Kube, KubeError, connect

    namespace, kind, name = parse_workload(workload)
    api = await connect(kubeconfig)
    try:
        kube = Kube(api)
        annotations: dict[str, str] = {}
        note = ""
        if kind in KINDS:
            api_version, plural = KINDS[kind]
            try:
                obj = await kube.get(api_version, plural, name, namespace=namespace)
                annotations = (obj.get("metadata") or {}).get("annotations") or {}
            except KubeError as e:
                note = f"{kind} {namespace}/{name}: {e}"
        selector = f"involvedObject.name={name},involvedObject.kind={kind}"
        try:
            doc = await kube.request(
                "GET", f"/api/v1/namespaces/{namespace}/events", query=[("fieldSelector", selector)]
            )
            found = [_event(e) for e in doc.get("items") or []]
        except KubeError as e:
            found, note = [], f"{note}; events: {e}".lstrip("; ")
        return annotations, sorted(found, key=lambda e: e.at), note
    finally:
        await api.close()


def _kubeconfig(given: Path | None, no_cluster: bool) -> Path | None:
    """--kubeconfig, else $KUBECONFIG (its first file, as kubectl passes it to plugins), else
    ~/.kube/config if there is one."""
    if no_cluster:
        return None
    if given is not None:
        return given
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if env:
        return Path(env)
    default = Path.home() / ".kube" / "config"
    return default if default.is_file() else None


async def _explain(
    workload: str,
    bootstrap: str | None,
    kubeconfig: Path | None,
    last: int,
    output: str,
    follow: bool,
) -> None:
    records = Records(workload)
    annotations: dict[str, str] = {}
    cluster_events: list[ClusterEvent] = []
    # The cluster first: every Event and annotation then names a decision the topics hold.
    if kubeconfig is not None:
        annotations, cluster_events, note = await read_cluster(kubeconfig, workload)
        if note:
            print(f"cluster: {note}", file=sys.stderr)
    async with History(bootstrap, TOPICS) as history:
        records.add(await history.read_to_end())
        x = explain(
            workload,
            records.decisions,
            records.actuations,
            records.recommendations,
            annotations=annotations,
            events=cluster_events,
            last=last,
        )
        _print(x, output)
        if not follow:
            return
        shown = {e.decision_id: e for e in x.decisions}
        async for batch in history.follow():
            records.add(batch)
            touched = {
                m.value.decision_id
                for m in batch
                if isinstance(m.value, events.ScaleDecision | events.Actuation)
                and m.value.workload == workload
            }
            if not touched:
                continue
            now = explain(
                workload,
                records.decisions,
                records.actuations,
                records.recommendations,
                last=len(records.decisions),
            )
            for e in now.decisions:
                if e.decision_id in touched and shown.get(e.decision_id) != e:
                    shown[e.decision_id] = e
                    if output == "json":
                        print(msgspec.json.encode(e).decode(), flush=True)
                    else:
                        print("\n".join(["", *render_entry(e)]), flush=True)


def _print(x: Explanation, output: str) -> None:
    if output == "json":
        print(msgspec.json.encode(x).decode(), flush=True)
    else:
        print(render(x), flush=True)


def explain_cmd(args: argparse.Namespace) -> int:
    """Why did it scale? The last decisions for WORKLOAD: time, from -> to, the rule that
    bound it and its inputs, and whether the actuator applied or refused it (and why)."""
    parse_workload(args.workload)
    if args.last < 1:
        raise CommandError(f"{args.last} is not in the range x>=1", "--last/-n")
    kubeconfig = _kubeconfig(args.kubeconfig, args.no_cluster)
    try:
        asyncio.run(
            _explain(args.workload, args.bootstrap, kubeconfig, args.last, args.output, args.follow)
        )
    except KeyboardInterrupt:
        return 130
    return 0


def register(commands: Commands) -> None:
    p = commands.command("explain", explain_cmd)
    p.add_argument(
        "workload", metavar="WORKLOAD", help="namespace/kind/name, e.g. shop/Deployment/web"
    )
    p.add_argument(
        "--last", "-n", type=int, default=10, help="how many decisions to show (default: 10)"
    )
    p.add_argument("--output", "-o", choices=("text", "json"), default="text", help="text or json")
    p.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="then print each new decision and its outcome",
    )
    bootstrap_option(p)
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="read the object's annotations and Events (default: $KUBECONFIG, ~/.kube/config)",
    )
    p.add_argument("--no-cluster", action="store_true", help="Kafka only")
