"""`governor explain` on the real broker and the real API server, through the kubectl plugin.

Records for a workload of this run go to governor.recommendations, governor.decisions and
governor.actuations; the Deployment carries governor.dev/* annotations and an Event that names
a decision. `kubectl governor explain` (real kubectl finding `kubectl-governor` on PATH) prints
them; `-o json` gives the same as a document; `--follow` prints a decision produced after it
started, then its outcome.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from governor import events
from governor.bus import Producer
from governor.explain import Explained, Explanation
from governor.kube import Kube, connect
from governor.topics import ensure_topics
from tests.support.ci import unavailable
from tests.support.explain import actuation, decision, recommendation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BIN = Path(sys.executable).parent


def run_cli(argv: list[str], env: dict[str, str]) -> str:
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout


def plugin_env(bootstrap: str, kubeconfig: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "GOVERNOR_KAFKA_BOOTSTRAP": bootstrap,
        "KUBECONFIG": str(kubeconfig),
    }


async def make_deployment(kube: Kube, namespace: str, d: events.ScaleDecision) -> None:
    await kube.create("v1", "namespaces", {"metadata": {"name": namespace}})
    labels = {"app": "web"}
    await kube.create(
        "apps/v1",
        "deployments",
        {
            "metadata": {
                "name": "web",
                "namespace": namespace,
                "annotations": {
                    "governor.dev/decision-seq": str(d.seq),
                    "governor.dev/decision-id": d.decision_id,
                    "governor.dev/decision-reason": "rate_limit",
                },
            },
            "spec": {
                "replicas": d.to_replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "web", "image": "web:1"}]},
                },
            },
        },
        namespace=namespace,
    )
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "web.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "web",
            "namespace": namespace,
        },
        "reason": "GovernorScaled",
        "message": f"scaled 1->5 (seq {d.seq}, {d.decision_id}): applied",
        "type": "Normal",
        "source": {"component": "governor-actuator"},
        "firstTimestamp": "2026-12-01T20:00:00Z",
        "lastTimestamp": "2026-12-01T20:00:00Z",
        "count": 1,
    }
    await kube.create("v1", "events", event, namespace=namespace)


async def test_kubectl_governor_explain_shows_decisions_outcomes_annotations_and_events(
    kafka_bootstrap: str, kubeconfig_path: Path, unique_suffix: str
) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        unavailable("kubectl is not on PATH (apt-get install kubectl)")
    await ensure_topics(kafka_bootstrap)
    namespace = f"explain-{unique_suffix}"
    workload = f"{namespace}/Deployment/web"
    now = time.time()
    first = decision(1, 1, 5, workload, at=now - 60, desired=5)
    second = decision(2, 5, 3, workload, at=now - 30, desired=5)
    async with Producer(kafka_bootstrap) as p:
        await p.send(events.RECOMMENDATIONS, recommendation(now - 61, 1, workload))
        await p.send(events.DECISIONS, first)
        await p.send(events.ACTUATIONS, actuation(first, "applied", "applied"))
        await p.send(events.DECISIONS, second)
        await p.send(events.ACTUATIONS, actuation(second, "refused", "paused"))
    api = await connect(kubeconfig_path)
    try:
        await make_deployment(Kube(api), namespace, first)
    finally:
        await api.close()
    env = plugin_env(kafka_bootstrap, kubeconfig_path)

    text = run_cli(
        [kubectl, "governor", "explain", workload],
        env,
    )
    print(text)
    assert f"{workload}: 2 decisions (oldest first)" in text
    assert "seq 1  1 -> 5  applied\n" in text
    assert "seq 2  5 -> 3  refused (paused)" in text
    assert "bound by: rate_limit" in text
    assert "input:    rps=42 (target 10 AverageValue, wants 5" in text
    assert "workload: ready 1/1, wanted 5, floor 1, bounds [1, 20], pool default" in text
    assert f"event:    Normal GovernorScaled: scaled 1->5 (seq 1, {first.decision_id})" in text
    assert "governor.dev/decision-seq: 1" in text

    doc = run_cli(
        [str(BIN / "governor"), "explain", workload, "-o", "json", "--last", "1"],
        env,
    )
    x = msgspec.json.decode(doc, type=Explanation)
    assert [(e.seq, e.outcome, e.outcome_reason) for e in x.decisions] == [(2, "refused", "paused")]
    assert x.annotations["governor.dev/decision-id"] == first.decision_id

    # --follow: a decision made after it started, then its outcome, one JSON line each.
    follow = await asyncio.create_subprocess_exec(
        str(BIN / "governor"),
        *("explain", workload, "-o", "json", "--follow", "--no-cluster"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert follow.stdout is not None
    try:
        line = await asyncio.wait_for(follow.stdout.readline(), 60)
        initial = msgspec.json.decode(line, type=Explanation)
        assert [e.seq for e in initial.decisions] == [1, 2]
        third = decision(3, 3, 6, workload, at=time.time(), desired=5)
        async with Producer(kafka_bootstrap) as p:
            await p.send(events.DECISIONS, third)
            line = await asyncio.wait_for(follow.stdout.readline(), 30)
            new = msgspec.json.decode(line, type=Explained)
            assert (new.seq, new.outcome) == (3, "pending")
            await p.send(events.ACTUATIONS, actuation(third, "applied", "applied"))
            line = await asyncio.wait_for(follow.stdout.readline(), 30)
            done = msgspec.json.decode(line, type=Explained)
            assert (done.seq, done.outcome, done.to_replicas) == (3, "applied", 6)
    finally:
        follow.terminate()
        await follow.wait()


def test_a_workload_that_is_not_namespace_kind_name_is_refused_with_the_form() -> None:
    done = subprocess.run(
        [str(BIN / "governor"), "explain", "web", "--no-cluster"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "namespace/kind/name" in done.stderr
