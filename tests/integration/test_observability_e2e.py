"""Dashboards and alerts against a real Prometheus scraping the running pipeline.

Collector, aggregator and decider run as processes on the real broker (as in
test_pipeline_e2e.py), the actuator as a process against the real API server (the devcluster) as
its ServiceAccount with the kustomize base's RBAC (as in test_actuator_e2e.py). The test plays
the cluster: a capacity pool of its own with a GPU+RDMA node and a CPU node on governor.cluster,
WorkloadStates on governor.workloads (updated after every decision), and three ScalingPolicies,
on governor.policies and on the API server alike:

- `web` (Deployment, on the API server), samples pushed to the collector's HTTP endpoint;
- `train` (PyTorchJob, elastic, 1 GPU + 1 RDMA VF per replica, restarted 3 times), samples
  produced straight to the metrics topic; it wants more replicas than the pool has GPUs/NICs,
  so the pool is short. Its PyTorchJob does not exist: its decisions are refused
  (`target_not_found`, after a 404);
- `frozen` (Deployment), a `prometheus` source whose query returns nothing: its source is down.

Samples, load windows, recommendations and decisions go through topics of this run alone: the
decider publishes to the decisions topic the actuator reads. The test sends each web decision
there a second time -- a redelivery, audited as a `replay` (the fence holds it: no patch) -- and
the web decision before it once more, refused as `stale` (the fence is past it). The test also
sends decisions for a Deployment in a namespace the actuator's config allows but its RBAC does
not: the API server answers 403, the actuation fails (`kube_403`).

A cluster collector runs too, on tables of this run alone, for its metrics (the leader Lease).
A real Prometheus (Debian's 2.42) scrapes the five services every second with governor's alert
rules loaded -- a copy of deploy/prometheus/rules/governor.rules.yaml whose `for:` are all 3 s,
expressions untouched. Then:

1. every query of every committed dashboard (deploy/grafana/dashboards/*.json), with the
   template variables set to this run's workloads and pool, parses and returns data; a query
   over a per-workload or per-pool metric returns series of this run's workloads / pool (the
   actuator's metrics have no workload label -- bounded cardinality -- but its only scraper is
   this Prometheus and its only input this run's decisions);
2. every alert expression (each operand of `unless`, without its threshold) parses and returns
   data the same way, and every rule evaluates without error; the actuator's alerts
   (GovernorActuatorErrors, GovernorActuatorRefusals, GovernorKubernetesApiErrors) fire;
3. the actuator really moved `web` (its Deployment carries the seq and replicas of an applied
   decision) and the actuations topic has the applied, refused and failed records;
4. with the pipeline flowing, GovernorPipelineStalled{stage="decider"} is not firing; after the
   decider is stopped (SIGTERM) while samples keep flowing, it fires.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from governor import events
from governor.bus import Consumer, Producer
from governor.kube import Kube
from governor.policy.actuation import ANN_SEQ
from governor.topics import ensure_topics
from tests.fixtures.prometheus_stack import governor_prometheus, short_for_copy, wait_until
from tests.integration.test_actuator_kit import (
    ActuationLog,
    admin,  # noqa: F401 - fixture
    create_namespace,
    decision,
    deployment,
    install_base_rbac,
    service_account_kubeconfig,
)
from tests.support.policies import average_metric, policy_record, scaling_policy_obj
from tests.support.procs import Service, free_port, governor_service
from tests.support.topics import run_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
RULES = ROOT / "deploy" / "prometheus" / "rules" / "governor.rules.yaml"

# The actuator's alerts, which must fire here (with the copy's `for: 3s`).
ACTUATOR_ALERTS = (
    "GovernorActuatorErrors",
    "GovernorActuatorRefusals",
    "GovernorKubernetesApiErrors",
)
# GovernorKubernetesApiErrors: rate over 5m > 0.1/s, i.e. more than 30 errors seen to increase.
FORBIDDEN_BURST = 50
# Metrics whose every series carries a workload label / a pool label.
PER_WORKLOAD = (
    "governor_decider_metric_value",
    "governor_decider_metric_target",
    "governor_decider_replicas",
    "governor_decider_shadow_replicas",
    "governor_decider_workload_decisions_total",
    "governor_decider_panic_mode",
    "governor_decider_shortfall_replicas",
    "governor_decider_elastic_restarts",
    "governor_collector_source_up",
    "governor_collector_push_last_sample_timestamp_seconds",
)
PER_POOL = (
    "governor_decider_pool_capacity",
    "governor_decider_pool_allocated",
    "governor_decider_pool_shortfall",
    "governor_decider_shortfall_replicas",
    "governor_decider_shortfalls_total",
)
GiB = float(2**30)


def _policy_obj(ns: str, name: str, pool: str, **spec: Any) -> dict[str, Any]:
    return scaling_policy_obj(ns, name, **{"minReplicas": 1, "pool": pool, **spec})


def _policy(obj: dict[str, Any]) -> events.PolicyRecord:
    return policy_record(obj)


def dashboard_queries() -> list[tuple[str, str, str, str]]:
    """(dashboard, panel title, refId, expr) of every panel query of the committed JSON."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        doc = json.loads(path.read_text())
        for panel in doc["panels"]:
            for t in panel.get("targets", []):
                out.append((path.stem, panel["title"], t["refId"], t["expr"]))
    return out


def _split_top(expr: str, word: str) -> list[str]:
    """Split on a binary operator keyword at parenthesis depth 0."""
    parts, depth, start = [], 0, 0
    i = 0
    pattern = re.compile(rf"\s{word}\s")
    while i < len(expr):
        c = expr[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and (m := pattern.match(expr, i)):
            parts.append(expr[start:i])
            i = start = m.end()
            continue
        i += 1
    parts.append(expr[start:])
    return [p.strip() for p in parts]


def _without_threshold(expr: str) -> str:
    """`<query> > 0` -> `<query>`: the data an alert's condition is computed on."""
    m = re.match(r"^(.*\S)\s*(?:>|<|>=|<=|==|!=)\s*[0-9.]+$", expr.strip(), re.S)
    assert m, f"an alert expression is not `<query> <op> <number>`: {expr!r}"
    return m.group(1)


def alert_queries() -> list[tuple[str, dict[str, str], str]]:
    """(alert, its fixed labels, data query) for each operand of every alert rule."""
    doc = yaml.safe_load(RULES.read_text())
    out = []
    for group in doc["groups"]:
        for rule in group["rules"]:
            for part in _split_top(" ".join(rule["expr"].split()), "unless"):
                out.append((rule["alert"], rule.get("labels", {}), _without_threshold(part)))
    return out


def _fill(expr: str, ns: str, pool: str) -> str:
    return (
        expr.replace("$__rate_interval", "1m")
        .replace("$workload", f"{ns}/.*")
        .replace("$pool", pool)
    )


def _labels_ok(expr: str, result: list[dict[str, Any]], ns: str, pool: str) -> str | None:
    """Why the result does not show this run's workloads / pool, or None."""
    per_workload = any(m in expr for m in PER_WORKLOAD) and "by (pool)" not in expr
    if per_workload and not any(
        s["metric"].get("workload", "").startswith(f"{ns}/") for s in result
    ):
        return f"no series with a workload of {ns}: {result[:3]}"
    per_pool = any(m in expr for m in PER_POOL) and "pool" in expr
    if per_pool and not any(s["metric"].get("pool") == pool for s in result):
        return f"no series of pool {pool}: {result[:3]}"
    return None


async def test_dashboards_and_alerts_on_a_real_prometheus(
    kafka_bootstrap: str,
    tmp_path: Path,
    unique_suffix: str,
    admin: Kube,  # noqa: F811
    kubeconfig_path: Path,
) -> None:
    bootstrap = kafka_bootstrap
    await ensure_topics(bootstrap)
    ns = f"obs-{unique_suffix}"
    pool = f"obs-{unique_suffix}"
    web, train, frozen = (
        f"{ns}/Deployment/web",
        f"{ns}/PyTorchJob/train",
        f"{ns}/Deployment/frozen",
    )
    ours = {web, train, frozen}
    # Allowed by the actuator's config, not by its RBAC (no RoleBinding there).
    forbidden_ns = f"obs-forbidden-{unique_suffix}"
    forbidden = f"{forbidden_ns}/Deployment/web"

    # Topics of this run alone: another aggregator or decider on the shared broker never sees
    # this run's samples or windows, and the actuator sees only this run's decisions.
    (
        metrics_topic,
        load_topic,
        recommendations_topic,
        decisions_topic,
        actuations_topic,
    ) = await run_topics(
        bootstrap,
        "obs",
        unique_suffix,
        events.METRICS,
        events.LOAD,
        events.RECOMMENDATIONS,
        events.DECISIONS,
        events.ACTUATIONS,
    )

    # --- the API server: the actuator's RBAC in `ns` only, web's Deployment, the policies ------
    for n in (ns, forbidden_ns):
        await create_namespace(admin, n)
    await install_base_rbac(admin, [ns])
    sa_kubeconfig = await service_account_kubeconfig(
        admin, kubeconfig_path, tmp_path / "actuator.kubeconfig"
    )
    await admin.apply(deployment(ns, "web", 1), field_manager="tests")

    agg_port, dec_port, col_port, act_port = free_port(), free_port(), free_port(), free_port()
    cc_port = free_port()
    rules = short_for_copy(RULES, tmp_path / "governor.rules.yaml", "3s")
    prom = governor_prometheus(
        tmp_path / "prometheus",
        {
            "governor-collector": col_port,
            "governor-aggregator": agg_port,
            "governor-decider": dec_port,
            "governor-actuator": act_port,
            "governor-cluster-collector": cc_port,
        },
        [rules],
    )

    producer = Producer(bootstrap)
    await producer.start()
    nodes = [
        events.NodeState(
            node=f"{pool}-gpu",
            pool=pool,
            allocatable={"cpu": 32.0, "memory": 128 * GiB},
            devices=[
                *(
                    events.Device(type="gpu", minor=i, pcie=str(i), free=100, total=100)
                    for i in (0, 1)
                ),
                *(
                    events.Device(type="rdma", minor=i, pcie=str(i), free=1, total=1)
                    for i in (0, 1)
                ),
            ],
            observed_at=time.time(),
        ),
        events.NodeState(
            node=f"{pool}-cpu",
            pool=pool,
            allocatable={"cpu": 16.0, "memory": 64 * GiB},
            observed_at=time.time(),
        ),
    ]
    for node in nodes:
        await producer.send(events.CLUSTER, node)
    policies = [
        _policy_obj(
            ns,
            "web",
            pool,
            maxReplicas=20,
            metrics=[average_metric()],
            panic={"windowSeconds": 6, "stableWindowSeconds": 60},
        ),
        # A Shadow of web asking for twice as many: the shadow panel's series.
        _policy_obj(
            ns,
            "web-shadow",
            pool,
            targetRef={"kind": "Deployment", "name": "web"},
            maxReplicas=20,
            metrics=[average_metric(average=5)],
            mode="Shadow",
        ),
        _policy_obj(
            ns,
            "train",
            pool,
            targetRef={
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "name": "train",
                "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
            },
            maxReplicas=8,
            elastic={"floor": 1},
            metrics=[average_metric("queue")],
        ),
        _policy_obj(
            ns,
            "frozen",
            pool,
            maxReplicas=4,
            metrics=[
                average_metric(
                    source={
                        "type": "prometheus",
                        "serverAddress": prom.url,
                        "query": "sum(governor_observability_test_no_such_metric)",
                        "intervalSeconds": 1,
                    }
                )
            ],
        ),
    ]
    for obj in policies:
        await admin.apply(obj, field_manager="tests")
        await producer.send(events.POLICIES, _policy(obj))
    requests = {
        web: {"cpu": 0.5, "memory": 0.5 * GiB},
        train: {
            "cpu": 2.0,
            "memory": 8 * GiB,
            "nvidia.com/gpu": 1.0,
            "koordinator.sh/rdma": 1.0,
        },
    }
    restarts = {web: 0, train: 3}

    def state(workload: str, replicas: int) -> events.WorkloadState:
        return events.WorkloadState(
            workload=workload,
            spec_replicas=replicas,
            ready_replicas=replicas,
            observed_at=time.time(),
            requests=requests[workload],
            pool=pool,
            restarts=restarts[workload],
            started_at=time.time() - 3600,
        )

    for wl in (web, train):
        await producer.send(events.WORKLOADS, state(wl, 1))

    def service(name: str, settings: dict[str, str], port: int) -> Service:
        return governor_service(name, bootstrap, settings, tmp_path / f"{name}.log", port=port)

    aggregator = service(
        "aggregator",
        {
            "APP_ID": f"agg-{unique_suffix}",
            "DATA_DIR": str(tmp_path / "agg"),
            "PUBLISH_INTERVAL_MS": "300",
            "METRICS_TOPIC": metrics_topic.name,
            "LOAD_TOPIC": load_topic.name,
        },
        agg_port,
    )
    decider = service(
        "decider",
        {
            "GROUP_ID": f"dec-{unique_suffix}",
            "LOAD_TOPIC": load_topic.name,
            "RECOMMENDATIONS_TOPIC": recommendations_topic.name,
            "DECISIONS_TOPIC": decisions_topic.name,
        },
        dec_port,
    )
    collector = service(
        "collector", {"HTTP_HOST": "127.0.0.1", "METRICS_TOPIC": metrics_topic.name}, col_port
    )
    actuator_config = tmp_path / "actuator.yaml"
    actuator_config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap": bootstrap},
                "group_id": f"act-{unique_suffix}",
                "decisions_topic": decisions_topic.name,
                "actuations_topic": actuations_topic.name,
                "kubeconfig": str(sa_kubeconfig),
                "allowed_namespaces": [ns, forbidden_ns],
                "http": {"host": "127.0.0.1", "port": act_port},
            }
        )
    )
    actuator = Service(
        "governor-actuator",
        {"GOVERNOR_ACTUATOR_CONFIG": str(actuator_config)},
        act_port,
        tmp_path / "actuator.log",
    )
    # A cluster collector for its own metrics (the leader Lease's alerts): its tables go to
    # topics of this run alone, since the test plays the cluster on the shared ones.
    cc_topics = await run_topics(
        bootstrap, "obs", unique_suffix, events.POLICIES, events.WORKLOADS, events.CLUSTER
    )
    cluster_collector = service(
        "cluster-collector",
        {
            "KUBECONFIG": str(kubeconfig_path),
            "POLICIES_TOPIC": cc_topics[0].name,
            "WORKLOADS_TOPIC": cc_topics[1].name,
            "CLUSTER_TOPIC": cc_topics[2].name,
            "METRICS_HOST": "127.0.0.1",
            "LEASE_NAME": f"obs-{unique_suffix}",
            "LEASE_NAMESPACE": ns,
        },
        cc_port,
    )
    services = [aggregator, decider, collector, actuator, cluster_collector]

    follow = Consumer(bootstrap, [decisions_topic], group_id=None, check_keys=False)
    actuations = ActuationLog(bootstrap, actuations_topic.name)
    decided: dict[str, events.ScaleDecision] = {}  # the decider's, by decision id
    stop_feeding = asyncio.Event()

    async def cluster() -> None:
        """Every decision of the decider is taken up at once by its workload; web's are sent to
        the actuator a second time (a redelivery: a replay), with the one before (stale)."""
        previous: list[events.ScaleDecision] = []
        while True:
            for m in await follow.poll(500):
                d = m.value
                if d is None or d.workload not in ours or d.decision_id in decided:
                    continue  # the test's own: forbidden's, and the redeliveries
                decided[d.decision_id] = d
                if d.workload == web:
                    for again in (d, *previous):
                        await producer.send(decisions_topic, again)
                    previous = [d]
                if d.workload in requests:
                    await producer.send(events.WORKLOADS, state(d.workload, d.to_replicas))

    async def feed() -> None:
        """Real-time samples: web's load is a sawtooth (decisions keep coming), train's high."""
        async with aiohttp.ClientSession() as http:
            push_url = f"http://127.0.0.1:{col_port}/v1/samples"
            # one bad push (400) and one undecodable record (dead letter) for the error panels
            assert (await http.post(push_url, data=b"{not json")).status == 400
            await (await producer.send_raw(metrics_topic.name, b"\xff garbage", key=b"x"))
            t = 0
            while not stop_feeding.is_set():
                now = time.time()
                rps = 30.0 + 10.0 * (t % 30)  # 30..320 over 30 steps
                sample = {"workload": web, "metric": "rps", "value": rps, "timestamp": now}
                resp = await http.post(push_url, json={"samples": [sample]})
                assert resp.status == 200, await resp.text()
                await producer.send(
                    metrics_topic,
                    events.MetricSample(workload=train, metric="queue", value=80.0, timestamp=now),
                )
                t += 1
                await asyncio.sleep(0.25)

    def has_data(expr: str) -> bool:
        ok, result = prom.try_query(expr)
        return ok and bool(result)

    def logs() -> str:
        return "\n".join(s.tail(1500) for s in services)

    tasks: list[asyncio.Task[None]] = []
    try:
        await actuations.start()
        await asyncio.gather(*(asyncio.to_thread(s.start) for s in services))
        await follow.start()
        tasks = [asyncio.create_task(cluster()), asyncio.create_task(feed())]

        # --- a decision the API server forbids (403): a failed actuation and a Kubernetes API
        # error. Once Prometheus has the counters' series, a burst of them: the first value of a
        # series is no increase to increase()/rate(), the burst is.
        sent_forbidden = [decision(forbidden, 1, 2)]
        await producer.send(decisions_topic, sent_forbidden[0])
        seen = await asyncio.to_thread(
            wait_until,
            lambda: (
                has_data('governor_actuator_kube_errors_total{code="403"}')
                and has_data('governor_actuator_actuations_total{outcome="failed"}')
            ),
            120,
            0.5,
        )
        assert seen, f"the actuator's 403 is not in Prometheus:\n{actuator.tail()}"
        for seq in range(2, FORBIDDEN_BURST + 2):
            sent_forbidden.append(decision(forbidden, seq, 2))
            await producer.send(decisions_topic, sent_forbidden[-1])

        # --- 1 + 2: every dashboard query and every alert expression has this run's data ------
        queries = [(d, t, r, _fill(e, ns, pool)) for d, t, r, e in dashboard_queries()]
        assert len(queries) >= 30
        # Each panel query and each alert's query, by the key its problem is reported under.
        checks: list[tuple[tuple[str, ...], str]] = [
            ((dash, title, ref), expr) for dash, title, ref, expr in queries
        ]
        checks += [
            (("alert", alert, labels.get("stage", labels.get("source", "")), expr), expr)
            for alert, labels, expr in alert_queries()
        ]
        pending: dict[tuple[str, ...], str] = {}

        def check_all() -> dict[tuple[str, ...], str]:
            problems: dict[tuple[str, ...], str] = {}
            for key, expr in checks:
                ok, result = prom.try_query(expr)
                if not ok:
                    problems[key] = f"error: {result}"
                elif not result:
                    problems[key] = "no data"
                elif why := _labels_ok(expr, result, ns, pool):  # type: ignore[arg-type]
                    problems[key] = why
            return problems

        deadline = time.monotonic() + 240
        while True:
            pending = await asyncio.to_thread(check_all)
            if not pending or time.monotonic() > deadline:
                break
            await asyncio.sleep(2)
        detail = "\n".join(f"{k}: {v}" for k, v in sorted(pending.items()))
        assert not pending, f"queries without this run's data:\n{detail}\n{logs()}"
        health = await asyncio.to_thread(prom.rules_health)
        assert health and all(h == "ok" for _, h, _ in health), health

        # The actuator's panels show what was provoked: applied patches, stale redeliveries,
        # the forbidden namespace's 403s.
        def actuator_series() -> tuple[set[tuple[str, str]], set[str]]:
            """(outcome, reason) pairs of the actuations and codes of the API errors."""
            ok_a, outcomes = prom.try_query(
                "sum by (outcome, reason) (governor_actuator_actuations_total)"
            )
            ok_k, codes = prom.try_query("sum by (code) (governor_actuator_kube_errors_total)")
            if not (ok_a and ok_k and isinstance(outcomes, list) and isinstance(codes, list)):
                return set(), set()
            return (
                {(s["metric"]["outcome"], s["metric"]["reason"]) for s in outcomes},
                {s["metric"]["code"] for s in codes},
            )

        def provoked() -> bool:
            outcomes, codes = actuator_series()
            return (
                "applied" in {o for o, _ in outcomes}
                and {("replay", "replay"), ("refused", "stale"), ("failed", "kube_403")} <= outcomes
                and "403" in codes
            )

        assert await asyncio.to_thread(wait_until, provoked, 60, 1.0), actuator_series()

        # --- the actuator's alerts fire ---------------------------------------------------------
        def firing(names: tuple[str, ...]) -> set[str]:
            return {
                a["labels"]["alertname"]
                for a in prom.alerts()
                if a["state"] == "firing" and a["labels"]["alertname"] in names
            }

        fired_actuator = await asyncio.to_thread(
            wait_until, lambda: firing(ACTUATOR_ALERTS) == set(ACTUATOR_ALERTS), 60, 1.0
        )
        assert fired_actuator, (
            f"not all of {ACTUATOR_ALERTS} fire: {await asyncio.to_thread(prom.alerts)}"
        )

        # --- 3: the actuator really moved web; the actuations topic says what happened --------
        obj = await admin.get("apps/v1", "deployments", "web", namespace=ns)
        applied_seq = int(obj["metadata"]["annotations"][ANN_SEQ])
        assert applied_seq >= 1, obj["metadata"]

        def applied_as_deployed() -> bool:
            return any(
                a.workload == web
                and a.outcome in ("applied", "noop")  # noop: the fence moved, not replicas
                and a.seq == applied_seq
                and a.to_replicas == obj["spec"]["replicas"]
                for a in actuations.records
            )

        assert await asyncio.to_thread(wait_until, applied_as_deployed, 30, 0.5), (
            obj,
            [a for a in actuations.records if a.workload == web][-5:],
        )
        by_outcome: dict[tuple[str, str], int] = {}
        for a in actuations.records:
            key = (a.workload, a.outcome)
            by_outcome[key] = by_outcome.get(key, 0) + 1
        assert by_outcome.get((web, "refused"), 0) >= 1, by_outcome  # the redeliveries
        for d in sent_forbidden[:1]:
            failed = await actuations.wait(d.decision_id, within_s=30)
            assert failed.outcome == "failed" and "403" in failed.reason, failed
        # train's PyTorchJob does not exist: each of its decisions is refused after a 404
        for d in [d for d in decided.values() if d.workload == train]:
            a = await actuations.wait(d.decision_id, within_s=30)
            assert a.outcome == "refused" and a.reason.startswith("target_not_found"), a
        assert {a.workload for a in actuations.records} <= ours | {forbidden}

        # The numbers behind the panels are this run's: GPUs and NICs of the node, the shortfall.
        ok, cap = await asyncio.to_thread(
            prom.try_query, f'governor_decider_pool_capacity{{pool="{pool}"}}'
        )
        assert ok and isinstance(cap, list)
        by_resource = {s["metric"]["resource"]: float(s["value"][1]) for s in cap}
        assert by_resource["nvidia.com/gpu"] == 2.0 and by_resource["koordinator.sh/rdma"] == 2.0
        assert math.isclose(by_resource["cpu"], 48.0)

        def short_of_train() -> float:
            ok, short = prom.try_query(f'governor_decider_shortfall_replicas{{workload="{train}"}}')
            return float(short[0]["value"][1]) if ok and short else 0.0  # type: ignore[index]

        # train's damped desire climbs to 8 (rate limits); the pool has GPUs and NICs for 2.
        short = await asyncio.to_thread(wait_until, short_of_train, 180, 2.0)
        assert short >= 1, decider.tail()
        ok, restarts_seen = await asyncio.to_thread(
            prom.try_query, f'governor_decider_elastic_restarts{{workload="{train}"}}'
        )
        assert ok and isinstance(restarts_seen, list) and float(restarts_seen[0]["value"][1]) == 3

        # --- 4: stopping the decider makes GovernorPipelineStalled{stage="decider"} fire ---------
        def stalled(state_: str) -> list[dict[str, Any]]:
            return [
                a
                for a in prom.alerts()
                if a["labels"]["alertname"] == "GovernorPipelineStalled"
                and a["labels"].get("stage") == "decider"
                and a["state"] == state_
            ]

        assert not await asyncio.to_thread(stalled, "firing"), "stalled while flowing"
        assert not await asyncio.to_thread(stalled, "pending"), "pending while flowing"
        await asyncio.to_thread(decider.stop)
        fired: list[dict[str, Any]] = []
        deadline = time.monotonic() + 300  # the rule's rate windows are 2 minutes
        while not fired and time.monotonic() < deadline:
            fired = await asyncio.to_thread(stalled, "firing")
            await asyncio.sleep(2)
        assert fired, (
            f"GovernorPipelineStalled did not fire: {await asyncio.to_thread(prom.alerts)}"
        )
        assert fired[0]["labels"]["severity"] == "critical"
        # The aggregator was still publishing windows: the alert is the decider's, not a lull.
        ok, windows = await asyncio.to_thread(
            prom.try_query, "sum(rate(governor_aggregator_windows_total[1m]))"
        )
        assert ok and isinstance(windows, list) and float(windows[0]["value"][1]) > 0
    finally:
        stop_feeding.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await follow.stop()
        await actuations.stop()
        for s in services:
            await asyncio.to_thread(s.stop)
        prom.stop()
        for name in ("web", "train", "frozen"):
            await producer.tombstone(events.POLICIES, f"{ns}/{name}")
        for node in nodes:
            await producer.tombstone(events.CLUSTER, node.node)
        await producer.stop()
