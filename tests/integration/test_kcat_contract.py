"""The topic contract (docs/topics.md) with a Kafka client that is not governor's own: `kcat`.

The commands are read from docs/topics.md (the fenced blocks after a `<!-- kcat:NAME -->` line)
and run as the doc shows them, with this run's broker, topics and workload put in place of
`127.0.0.1:9092`, `governor.*` and `shop/Deployment/web`: the doc cannot drift from what works.

The aggregator and the decider run as processes on topics of this run. kcat produces
MetricSamples as JSON lines; kcat reading the decisions topic sees the decision they cause; a
malformed line ends in the metrics DLQ with its reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shutil
import subprocess
import time
from pathlib import Path

import msgspec
import pytest

from governor import events
from governor.bus import Producer
from governor.spec import policy_from_obj
from governor.topics import ensure_topics
from tests.support.ci import unavailable
from tests.support.policies import average_metric, scaling_policy_obj
from tests.support.procs import governor_service
from tests.support.topics import PIPELINE, run_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

DOC = Path(__file__).resolve().parents[2] / "docs" / "topics.md"
DOC_BOOTSTRAP = "127.0.0.1:9092"
DOC_WORKLOAD = "shop/Deployment/web"
BLOCK = re.compile(r"<!-- kcat:(?P<name>[a-z-]+) -->\n```sh\n(?P<body>.*?)```", re.S)


def doc_commands() -> dict[str, str]:
    """The doc's kcat blocks by name."""
    return {m["name"]: m["body"] for m in BLOCK.finditer(DOC.read_text())}


def test_the_doc_has_the_commands_this_test_runs() -> None:
    assert set(doc_commands()) == {"produce", "subscribe", "produce-malformed", "dead-letters"}


@dataclasses.dataclass
class Place:
    """Where the doc's names go in this run."""

    bootstrap: str
    topics: dict[str, str]  # doc topic name -> this run's
    workload: str

    def __call__(self, command: str) -> str:
        command = command.replace(DOC_BOOTSTRAP, self.bootstrap)
        command = command.replace(DOC_WORKLOAD, self.workload)
        # longest first: governor.metrics.dlq before governor.metrics
        for doc_name in sorted(self.topics, key=len, reverse=True):
            command = command.replace(doc_name, self.topics[doc_name])
        return command


def run(command: str) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    # grep finding nothing (exit 1) is an empty answer, not a failure
    assert done.returncode in (0, 1), f"{command}\nexit {done.returncode}: {done.stderr}"
    return done.stdout


def policy(namespace: str) -> events.PolicyRecord:
    return events.PolicyRecord(
        policy=policy_from_obj(
            scaling_policy_obj(
                namespace,
                "web",
                minReplicas=1,
                maxReplicas=20,
                metrics=[average_metric("queue_depth")],
            )
        )
    )


async def test_kcat_samples_give_decisions_and_a_malformed_line_a_dead_letter(
    kafka_bootstrap: str, tmp_path: Path, unique_suffix: str
) -> None:
    if shutil.which("kcat") is None:
        unavailable("kcat is not on PATH (apt-get install kcat; deploy/components.sh ensure)")
    commands = doc_commands()
    await ensure_topics(kafka_bootstrap)
    metrics, load, recs, decisions = await run_topics(
        kafka_bootstrap, "kcat", unique_suffix, *PIPELINE
    )
    namespace = f"kcat-{unique_suffix}"
    place = Place(
        kafka_bootstrap,
        {
            events.METRICS.name: metrics.name,
            events.DECISIONS.name: decisions.name,
        },
        f"{namespace}/Deployment/web",
    )

    async with Producer(kafka_bootstrap) as producer:
        await producer.send(events.POLICIES, policy(namespace))
        await producer.send(
            events.WORKLOADS,
            events.WorkloadState(
                workload=place.workload, spec_replicas=1, ready_replicas=1, observed_at=time.time()
            ),
        )
        services = [
            governor_service(
                "aggregator",
                kafka_bootstrap,
                {
                    "APP_ID": f"kcat-agg-{unique_suffix}",
                    "METRICS_TOPIC": metrics.name,
                    "LOAD_TOPIC": load.name,
                    "DATA_DIR": str(tmp_path / "agg"),
                    "PUBLISH_INTERVAL_MS": "300",
                },
                tmp_path / "aggregator.log",
            ),
            governor_service(
                "decider",
                kafka_bootstrap,
                {
                    "GROUP_ID": f"kcat-dec-{unique_suffix}",
                    "LOAD_TOPIC": load.name,
                    "RECOMMENDATIONS_TOPIC": recs.name,
                    "DECISIONS_TOPIC": decisions.name,
                },
                tmp_path / "decider.log",
            ),
        ]
        try:
            for s in services:
                s.start()
            # A new consumer group starts at the newest offsets once it has its partitions:
            # keep producing (a sample every half second, as the doc's command does it) until
            # kcat sees the decision.
            seen: list[events.ScaleDecision] = []
            deadline = time.monotonic() + 90
            while not seen and time.monotonic() < deadline:
                run(place(commands["produce"]))
                for line in run(place(commands["subscribe"])).splitlines():
                    key, _, value = line.partition(" ")
                    assert key == place.workload, line
                    seen.append(msgspec.json.decode(value, type=events.ScaleDecision))
                await asyncio.sleep(0.5)
            assert seen, f"no decision within 90 s: {services[1].tail()}"
            first = seen[0]
            # 42 waiting per replica-target of 10 -> ceil(42 / 10) = 5 replicas
            assert (first.workload, first.from_replicas, first.to_replicas) == (
                place.workload,
                1,
                5,
            )
            assert first.reasons and first.inputs[0].metric == "queue_depth"

            run(place(commands["produce-malformed"]))
            dead: list[str] = []
            deadline = time.monotonic() + 30
            while not dead and time.monotonic() < deadline:
                dead = [
                    ln for ln in run(place(commands["dead-letters"])).splitlines() if '"lots"' in ln
                ]
                await asyncio.sleep(0.5)
            assert dead, f"the malformed line is not in {metrics.dlq}: {services[0].tail()}"
            headers, _, value = dead[0].partition("\t")
            assert "governor-dlq-reason=" in headers, headers
            assert "schema-version=1" in headers, headers
            assert msgspec.json.decode(value)["value"] == "lots"
        finally:
            for s in services:
                s.stop()
            await producer.tombstone(events.POLICIES, f"{namespace}/web")
