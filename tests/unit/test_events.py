"""The contract: every topic round-trips, old readers read newer messages, schemas export."""

import json
from pathlib import Path

import msgspec
import pytest

from governor import events
from governor.spec import policies_from_yaml
from tests.support.cli import governor
from tests.support.explain import recommendation

EXAMPLE = Path(__file__).parents[2] / "examples" / "web-policy.yaml"


def examples() -> dict[str, msgspec.Struct]:
    (policy,) = policies_from_yaml(EXAMPLE.read_text())
    reason = events.Reason(rule="metric", detail="rps 140 / 70 per pod", metric="rps", value=140.0)
    inp = events.MetricInput(metric="rps", value=140.0, target=70.0, target_type="AverageValue")
    wl = "shop/Deployment/web"
    decision = events.ScaleDecision(
        decision_id="d1",
        workload=wl,
        seq=7,
        from_replicas=2,
        to_replicas=2,
        reasons=[reason],
        inputs=[inp],
        policy_generation=1,
        newest_input=59.5,
        decided_at=60.0,
    )
    return {
        events.METRICS.name: events.MetricSample(
            workload=wl, metric="rps", value=3.0, timestamp=1.0
        ),
        events.LOAD.name: events.LoadWindow(
            workload=wl,
            metric="rps",
            window="stable",
            start=0,
            end=60,
            count=60,
            mean=2.0,
            max=3.0,
            p95=2.9,
            newest_sample=59.5,
        ),
        events.POLICIES.name: events.PolicyRecord(policy=policy, published_at=5.0),
        events.WORKLOADS.name: events.WorkloadState(
            workload=wl, spec_replicas=2, ready_replicas=2, observed_at=3.0, requests={"cpu": 0.5}
        ),
        events.CLUSTER.name: events.NodeState(
            node="n1",
            pool="gpu",
            allocatable={"cpu": 32.0},
            devices=[events.Device(type="gpu", minor=0, pcie="0")],
        ),
        events.RECOMMENDATIONS.name: msgspec.structs.replace(
            recommendation(60.0, 2, wl), reasons=[reason], inputs=[inp]
        ),
        events.DECISIONS.name: decision,
        # A shadow policy's decision: its own id and sequence, and the policy that made it.
        events.SHADOW_DECISIONS.name: msgspec.structs.replace(
            decision,
            decision_id=f"{wl}#shop/web-shadow#3",
            seq=3,
            to_replicas=4,
            policy="shop/web-shadow",
        ),
        events.ACTUATIONS.name: events.Actuation(
            decision_id="d1", workload=wl, seq=7, outcome="applied", reason="ok"
        ),
        events.SHORTFALLS.name: events.Shortfall(
            workload=wl,
            pool="gpu",
            wanted=4,
            granted=2,
            resources={"nvidia.com/gpu": 2},
            reason="x",
            at=1,
        ),
        events.DECIDER_STATE.name: events.DeciderCheckpoint(
            workload=wl, seq=7, last_to=3, scale_state=b"\x93\x90\x90\xc0"
        ),
        events.QUOTAS.name: events.QuotaState(
            quota="shop/compute-quota",
            namespace="shop",
            hard={"requests.cpu": 40, "count/pods": 20},
            used={"requests.cpu": 38},
            covers={wl: {"requests.cpu": 0.5, "count/pods": 1}},
            scopes=["PriorityClass"],
            priority_classes=["high"],
        ),
        events.QUEUES.name: events.QueueState(
            queue="research",
            capability={"nvidia.com/gpu": 16},
            guarantee={"nvidia.com/gpu": 4},
            weight=2,
            reclaimable=False,
            parent="root",
            covers={wl: {"nvidia.com/gpu": 1}},
        ),
        events.COLLECTOR_SOURCES.name: events.CollectorMember(
            collector="governor-collector-host-1", partitions=[0, 3], at=1.0
        ),
    }


def test_every_topic_has_an_example_and_round_trips() -> None:
    ex = examples()
    assert set(ex) == {t.name for t in events.TOPICS}
    for topic in events.TOPICS:
        value = ex[topic.name]
        assert isinstance(value, topic.type)
        data = msgspec.json.encode(value)
        assert msgspec.json.decode(data, type=topic.type) == value
        assert isinstance(topic.key(value), str) and topic.key(value)


def test_old_reader_reads_newer_message() -> None:
    """A newer writer adds optional fields; today's reader ignores them (the evolution rule)."""

    class MetricSampleV2(events.MetricSample, kw_only=True):
        exemplar_trace_id: str = ""
        quality: float = 1.0

    newer = MetricSampleV2(
        workload="a/Deployment/b",
        metric="rps",
        value=1.5,
        timestamp=9.0,
        exemplar_trace_id="abc",
        quality=0.3,
    )
    old = msgspec.json.decode(msgspec.json.encode(newer), type=events.MetricSample)
    assert (old.workload, old.metric, old.value, old.timestamp) == (
        "a/Deployment/b",
        "rps",
        1.5,
        9.0,
    )


def test_newer_reader_reads_older_message() -> None:
    old_bytes = (
        b'{"workload":"a/Deployment/b","spec_replicas":1,"ready_replicas":1,"observed_at":1}'
    )
    state = msgspec.json.decode(old_bytes, type=events.WorkloadState)
    assert state.requests == {} and state.restarts == 0


def test_invalid_message_is_rejected_with_path() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.value"):
        msgspec.json.decode(
            b'{"workload":"w","metric":"m","value":"high","timestamp":1}', type=events.MetricSample
        )


def test_schema_export_writes_one_schema_per_topic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = governor(capsys, ["schema", "export", str(tmp_path)])
    assert result.code == 0, result.output
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(f"{t.name}.schema.json" for t in events.TOPICS)
    metrics = json.loads((tmp_path / "governor.metrics.schema.json").read_text())
    assert metrics["x-governor-topic"]["key"].startswith("workload")
    # The union of a single sample and a batch, told apart by the `kind` tag.
    assert metrics["discriminator"]["propertyName"] == "kind"
    assert set(metrics["discriminator"]["mapping"]) == {"sample", "batch"}
    assert {"MetricSample", "MetricBatch"} <= set(metrics["$defs"])


def test_topic_lookup_names_known_topics() -> None:
    assert events.topic_by_name("governor.load") is events.LOAD
    with pytest.raises(KeyError, match=r"governor\.metrics"):
        events.topic_by_name("nope")
