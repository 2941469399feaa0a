"""The collector's pure parts and its shell with fakes (no Kafka, no Prometheus)."""

from __future__ import annotations

import asyncio
import datetime
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from governor.events import MetricSample, PolicyRecord
from governor.spec import (
    KafkaLagSource as KafkaLagSpec,
)
from governor.spec import (
    PrometheusSource as PrometheusSpec,
)
from governor.spec import (
    PushSource as PushSpec,
)
from governor.spec import ScalingPolicy, TargetRef
from governor_collector.config import CollectorSettings, load
from governor_collector.policies import apply_record
from governor_collector.scheduler import Scheduler, WantedSource, plan, wanted_sources
from governor_collector.sources import (
    SOURCES,
    PullSource,
    SourceContext,
    SourceError,
    SourceTarget,
    register,
    source_name,
)
from governor_collector.sources.prometheus import parse_response, value_of
from governor_collector.sources.push import PushHub, decode_batch, push_routes
from governor_collector.sources.resource import parse_quantity, usage_from_pod_metrics
from tests.support.policies import scaling_policy
from tests.support.waiting import wait_for

W = "shop/Deployment/web"


def metric_value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


# --- registry -----------------------------------------------------------------------------------


def test_every_spec_source_type_is_registered() -> None:
    assert set(SOURCES) >= {"prometheus", "kafka_lag", "resource", "push"}
    assert source_name(PrometheusSpec(query="up")) == "prometheus"
    assert source_name(KafkaLagSpec(topic="t", consumer_group="g")) == "kafka_lag"
    assert source_name(PushSpec()) == "push"
    for name, cls in SOURCES.items():
        assert cls.name == name
        assert cls.config_type.__struct_config__.tag == name


# --- prometheus result -> value -----------------------------------------------------------------


def prom(body: str) -> tuple[float, float]:
    return value_of(parse_response(body.encode()))


def test_prometheus_vector_with_one_series() -> None:
    body = (
        '{"status":"success","data":{"resultType":"vector","result":'
        '[{"metric":{"job":"x"},"value":[1700000000.5,"42.25"]}]}}'
    )
    assert prom(body) == (1700000000.5, 42.25)


def test_prometheus_scalar() -> None:
    assert prom('{"status":"success","data":{"resultType":"scalar","result":[17,"3"]}}') == (
        17.0,
        3.0,
    )


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('{"status":"success","data":{"resultType":"vector","result":[]}}', "empty_result"),
        (
            '{"status":"success","data":{"resultType":"vector","result":['
            '{"metric":{"a":"1"},"value":[1,"1"]},{"metric":{"a":"2"},"value":[1,"2"]}]}}',
            "multiple_series",
        ),
        (
            '{"status":"success","data":{"resultType":"vector","result":'
            '[{"metric":{},"value":[1,"NaN"]}]}}',
            "bad_value",
        ),
        ('{"status":"success","data":{"resultType":"scalar","result":[1,"+Inf"]}}', "bad_value"),
        (
            '{"status":"success","data":{"resultType":"matrix","result":[]}}',
            "bad_result_type",
        ),
        (
            '{"status":"error","errorType":"bad_data","error":"parse error at char 3"}',
            "query_error",
        ),
        ("<html>502 Bad Gateway</html>", "bad_response"),
        ('{"status":"success","data":{"resultType":"vector","result":[{"x":1}]}}', "bad_response"),
    ],
)
def test_prometheus_results_that_are_not_one_number(body: str, reason: str) -> None:
    with pytest.raises(SourceError) as e:
        prom(body)
    assert e.value.reason == reason


# --- push batches ---------------------------------------------------------------------------------


def batch(*samples: dict[str, Any]) -> bytes:
    return msgspec.json.encode({"samples": list(samples)})


def good(**over: Any) -> dict[str, Any]:
    return {"workload": W, "metric": "rps", "value": 12.5, "timestamp": 1.7e9, **over}


def test_push_batch_decodes_and_defaults_the_source() -> None:
    out = decode_batch(batch(good(), good(source="app", labels={"zone": "a"})))
    assert [s.source for s in out] == ["push", "app"]
    assert out[1].labels == {"zone": "a"}


@pytest.mark.parametrize(
    ("body", "path", "reason_part"),
    [
        (batch(good(value="12")), "$.samples[0].value", "Expected `float`, got `str`"),
        (batch(good(), {"workload": W, "value": 1, "timestamp": 1}), "$.samples[1]", "metric"),
        (batch(good(workload="web")), "$.samples[0].workload", "namespace/kind/name"),
        (batch(good(workload="a//b")), "$.samples[0].workload", "namespace/kind/name"),
        (batch(good(metric="")), "$.samples[0].metric", "empty"),
        (batch(good(timestamp=0)), "$.samples[0].timestamp", "> 0"),
        (
            batch(good()).replace(b"12.5", b"1e400"),
            "$.samples[0].value",
            "out of range",
        ),
        (b'{"sample":[]}', "$", "sample"),
        (b'{"samples":{}}', "$.samples", "Expected `array`"),
        (b"[]", "$", "Expected `object`"),
    ],
)
def test_push_batch_errors_name_the_field(body: bytes, path: str, reason_part: str) -> None:
    from governor_collector.sources.push import BatchRejected

    with pytest.raises(BatchRejected) as e:
        decode_batch(body)
    assert e.value.status == 400
    assert e.value.body.error == "invalid_batch"
    assert e.value.body.path == path
    assert reason_part in (e.value.body.reason or "")


def test_push_malformed_json() -> None:
    from governor_collector.sources.push import BatchRejected

    with pytest.raises(BatchRejected) as e:
        decode_batch(b'{"samples": [')
    assert e.value.body.error == "malformed_json"


@given(
    st.lists(
        st.builds(
            dict,
            workload=st.just(W),
            metric=st.text(min_size=1, max_size=20),
            value=st.floats(allow_nan=False, allow_infinity=False),
            timestamp=st.floats(min_value=1, max_value=4e9),
        ),
        max_size=20,
    )
)
def test_push_batches_round_trip(samples: list[dict[str, Any]]) -> None:
    out = decode_batch(batch(*samples))
    assert [(s.metric, s.value, s.timestamp) for s in out] == [
        (d["metric"], d["value"], d["timestamp"]) for d in samples
    ]


class FakePublisher:
    def __init__(self, fail: Exception | None = None, delay: float = 0.0) -> None:
        self.published: list[MetricSample] = []
        self.fail = fail
        self.delay = delay

    async def publish(self, samples: Sequence[MetricSample]) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        self.published.extend(samples)


async def push_client(pub: FakePublisher, limit: int = 1024) -> TestClient[Any, Any]:
    app = web.Application()
    app.add_routes(push_routes(pub, PushHub(), max_body_bytes=limit))
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


async def test_push_endpoint_accepts_after_publish() -> None:
    pub = FakePublisher()
    client = await push_client(pub)
    try:
        r = await client.post("/v1/samples", data=batch(good(), good(metric="q")))
        assert r.status == 200
        assert await r.json() == {"accepted": 2}
        assert [s.metric for s in pub.published] == ["rps", "q"]
    finally:
        await client.close()


async def test_push_endpoint_rejects_bad_and_big_bodies_and_publishes_nothing() -> None:
    pub = FakePublisher()
    client = await push_client(pub, limit=200)
    try:
        r = await client.post("/v1/samples", data=batch(good(), good(value="x")))
        assert r.status == 400
        doc = await r.json()
        assert doc["path"] == "$.samples[1].value"
        r = await client.post("/v1/samples", data=batch(*[good()] * 10))
        assert r.status == 413
        assert (await r.json())["limit_bytes"] == 200

        async def chunks() -> Any:  # no Content-Length: the limit applies while reading
            for _ in range(10):
                yield b" " * 50

        r = await client.post("/v1/samples", data=chunks())
        assert r.status == 413
        assert pub.published == []
    finally:
        await client.close()


async def test_push_endpoint_503_when_kafka_does_not_ack() -> None:
    pub = FakePublisher(fail=RuntimeError("broker down"))
    client = await push_client(pub)
    try:
        r = await client.post("/v1/samples", data=batch(good()))
        assert r.status == 503
        assert (await r.json())["error"] == "kafka_unavailable"
    finally:
        await client.close()


# --- resource (metrics API) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("250m", 0.25),
        ("1", 1.0),
        ("2.5", 2.5),
        ("15051225n", 0.015051225),
        ("100u", 0.0001),
        ("128974848", 128974848.0),
        ("129M", 129e6),
        ("123Mi", 123 * 1024**2),
        ("1Gi", 1024**3),
        ("2k", 2000.0),
        ("1e3", 1000.0),
        ("1E3", 1000.0),
    ],
)
def test_parse_quantity(text: str, value: float) -> None:
    assert math.isclose(parse_quantity(text), value)


@pytest.mark.parametrize("text", ["", "abc", "1x", "Mi", "nan"])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


POD_METRICS = {
    "kind": "PodMetricsList",
    "apiVersion": "metrics.k8s.io/v1beta1",
    "metadata": {},
    "items": [
        {
            "metadata": {"name": "web-1", "namespace": "shop"},
            "timestamp": "2026-11-29T19:00:00Z",
            "window": "15s",
            "containers": [
                {"name": "app", "usage": {"cpu": "250m", "memory": "100Mi"}},
                {"name": "sidecar", "usage": {"cpu": "50m", "memory": "28Mi"}},
            ],
        },
        {
            "metadata": {"name": "web-2", "namespace": "shop"},
            "timestamp": "2026-11-29T19:00:05Z",
            "window": "15s",
            "containers": [{"name": "app", "usage": {"cpu": "100m", "memory": "64Mi"}}],
        },
    ],
}


def test_pod_metrics_to_mean_usage_per_pod() -> None:
    cpu = usage_from_pod_metrics(POD_METRICS, "cpu")
    assert cpu.pods == 2
    assert math.isclose(cpu.total, 0.4)
    assert math.isclose(cpu.mean, 0.2)
    newest = datetime.datetime(2026, 11, 29, 19, 0, 5, tzinfo=datetime.UTC).timestamp()
    assert cpu.timestamp == newest  # the newest pod's timestamp
    mem = usage_from_pod_metrics(POD_METRICS, "memory")
    assert math.isclose(mem.mean, (128 + 64) / 2 * 1024**2)


def test_pod_metrics_without_pods_is_an_error_not_zero() -> None:
    with pytest.raises(SourceError) as e:
        usage_from_pod_metrics({"items": []}, "cpu")
    assert e.value.reason == "no_pods"
    with pytest.raises(SourceError) as e:
        usage_from_pod_metrics({"items": [{"metadata": {}}]}, "cpu")
    assert e.value.reason == "bad_response"


# --- policies -> wanted sources -> plan ---------------------------------------------------------


def policy(name: str, *metrics: dict[str, Any], target: str = "web") -> ScalingPolicy:
    return scaling_policy(
        name,
        "shop",
        {
            "targetRef": {"kind": "Deployment", "name": target},
            "maxReplicas": 10,
            "metrics": list(metrics),
        },
    )


def prom_metric(name: str, query: str = "up") -> dict[str, Any]:
    return {
        "name": name,
        "target": {"type": "Value", "value": 10},
        "source": {"type": "prometheus", "query": query},
    }


def push_metric(name: str) -> dict[str, Any]:
    return {"name": name, "target": {"type": "AverageValue", "averageValue": 5}}


def test_wanted_sources_one_per_metric() -> None:
    wanted, conflicts = wanted_sources(
        {"shop/a": policy("a", prom_metric("rps"), push_metric("q"))}
    )
    assert conflicts == []
    assert set(wanted) == {(W, "rps"), (W, "q")}
    assert wanted[(W, "rps")].name == "prometheus"
    assert wanted[(W, "q")].name == "push"
    assert wanted[(W, "rps")].target.policy == "shop/a"


def test_wanted_sources_conflict_first_policy_wins() -> None:
    wanted, conflicts = wanted_sources(
        {
            "shop/b": policy("b", prom_metric("rps", "b")),
            "shop/a": policy("a", prom_metric("rps", "a")),
        }
    )
    assert wanted[(W, "rps")].target.policy == "shop/a"
    assert [(c.kept, c.dropped) for c in conflicts] == [("shop/a", "shop/b")]


def test_a_shadow_shares_its_active_policys_sources_without_a_conflict() -> None:
    shadow = policy("a-eager", prom_metric("rps", "shadow"), prom_metric("lat"))
    shadow = msgspec.structs.replace(
        shadow, spec=msgspec.structs.replace(shadow.spec, mode="Shadow")
    )
    # "shop/a-eager" sorts before "shop/b": the Active policy still comes first
    wanted, conflicts = wanted_sources(
        {"shop/a-eager": shadow, "shop/b": policy("b", prom_metric("rps"))}
    )
    assert conflicts == []
    assert wanted[(W, "rps")].target.policy == "shop/b"
    assert wanted[(W, "lat")].target.policy == "shop/a-eager"  # only the shadow names it


def test_plan_starts_stops_and_restarts_only_what_changed() -> None:
    before, _ = wanted_sources(
        {
            "shop/a": policy("a", prom_metric("rps"), prom_metric("lat")),
            "shop/c": policy("c", push_metric("q"), target="api"),
        }
    )
    after, _ = wanted_sources(
        {
            "shop/a": policy("a", prom_metric("rps", "sum(x)"), prom_metric("lat")),
            "shop/d": policy("d", push_metric("z"), target="db"),
        }
    )
    p = plan(before, after)
    assert p.restart == [(W, "rps")]
    assert p.stop == [("shop/Deployment/api", "q")]
    assert p.start == [("shop/Deployment/db", "z")]
    assert plan(after, after).empty


def test_policy_table_records() -> None:
    table: dict[str, ScalingPolicy] = {}
    p = policy("a", push_metric("q"))
    assert apply_record(table, "shop/a", PolicyRecord(p))
    assert not apply_record(table, "shop/a", PolicyRecord(p))  # same again: no change
    assert apply_record(table, "shop/a", None)  # tombstone
    assert table == {}
    assert not apply_record(table, "shop/a", None)


# --- the scheduler's loop, with a fake source --------------------------------------------------


class FakeSpec(msgspec.Struct, tag="fake_test", tag_field="type"):
    interval_seconds: float = 0.02


class FakeSource(PullSource[FakeSpec]):
    name = "fake_test"
    config_type = FakeSpec
    failing: ClassVar[str | None] = None
    polls: ClassVar[int] = 0

    async def collect(self, now: float) -> list[MetricSample]:
        type(self).polls += 1
        if type(self).failing:
            raise SourceError(type(self).failing or "", "told to fail")
        return [self.sample(float(self.polls), now)]


register(FakeSource)


async def test_failing_source_publishes_nothing_and_says_why() -> None:
    pub = FakePublisher()
    sched = Scheduler(SourceContext(), pub)
    target = SourceTarget(W, "fake", "shop", TargetRef(kind="Deployment", name="web"))
    FakeSource.failing = "unreachable"
    errors_before = metric_value(
        "governor_collector_source_errors_total", source="fake_test", reason="unreachable"
    )
    await sched.start(WantedSource(target, FakeSpec()))  # type: ignore[arg-type]
    up = {"source": "fake_test", "workload": W, "metric": "fake"}
    try:
        await wait_for(lambda: FakeSource.polls >= 3)
        assert pub.published == []
        assert metric_value("governor_collector_source_up", **up) == 0
        errors = metric_value(
            "governor_collector_source_errors_total", source="fake_test", reason="unreachable"
        )
        assert (errors or 0) - (errors_before or 0) >= 3
        FakeSource.failing = None
        await wait_for(lambda: len(pub.published) >= 2)
        assert metric_value("governor_collector_source_up", **up) == 1
    finally:
        await sched.close()
    assert metric_value("governor_collector_source_up", **up) is None  # removed with the source


async def test_source_logs_are_json_with_workload_and_metric(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from governor.telemetry import JsonFormatter

    sched = Scheduler(SourceContext(), FakePublisher())
    target = SourceTarget(W, "logged", "shop", TargetRef(kind="Deployment", name="web"), "shop/a")
    FakeSource.failing = None
    with caplog.at_level("INFO", logger="governor_collector.scheduler"):
        await sched.start(WantedSource(target, FakeSpec()))  # type: ignore[arg-type]
        await sched.close()
    fmt = JsonFormatter("collector")
    docs = [msgspec.json.decode(fmt.format(r)) for r in caplog.records]
    started = next(d for d in docs if d["msg"] == "source started")
    assert (started["workload"], started["metric"], started["source"], started["policy"]) == (
        W,
        "logged",
        "fake_test",
        "shop/a",
    )


# --- config -------------------------------------------------------------------------------------


def test_config_from_file_and_env(tmp_path: Any) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("http_port: 9000\nkafka:\n  bootstrap: k:1\n")
    s = load(
        env={
            "GOVERNOR_COLLECTOR_CONFIG": str(f),
            "GOVERNOR_COLLECTOR_PUSH_MAX_BODY_BYTES": "2048",
            "GOVERNOR_COLLECTOR_KAFKA__BOOTSTRAP": "k:2",
        }
    )
    assert s.http_port == 9000
    assert s.push_max_body_bytes == 2048
    assert s.kafka.bootstrap == "k:2"
    assert CollectorSettings().push_max_body_bytes == 1024 * 1024
