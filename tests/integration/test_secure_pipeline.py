"""The pipeline on the secure broker (SASL_SSL, ACLs from the topic table), lean: collector,
aggregator and decider as processes, each authenticated as its own principal; the test plays
the cluster side as `cluster-collector` and reads decisions as `viewer`. Pushed samples become
windows and a scale-up decision. Then no principal's password appears in any service's log or
in any metric the services expose.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import aiohttp
import msgspec
import pytest
from aiokafka import AIOKafkaConsumer

from governor import events
from governor.bus import Producer, codec_for
from governor.events import PRINCIPALS
from governor.kafka_security import aiokafka_options
from governor.spec import policy_from_obj
from tests.fixtures.kafka_secure import SecureBroker
from tests.integration.test_pipeline_e2e import policy_obj
from tests.support.procs import Service, governor_service

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _decision(
    decode: Callable[[bytes], events.ScaleDecision], raw: bytes | None
) -> events.ScaleDecision | None:
    """A decision, or None for what is not one (the ACL tests' probes share these topics)."""
    try:
        return decode(raw) if raw else None
    except msgspec.MsgspecError:
        return None


def secure_env(broker: SecureBroker, principal: str) -> dict[str, str]:
    sec = broker.security(principal)
    return {
        "KAFKA__SECURITY__PROTOCOL": sec.protocol,
        "KAFKA__SECURITY__USERNAME": sec.username,
        "KAFKA__SECURITY__PASSWORD_FILE": sec.password_file,
        "KAFKA__SECURITY__CA_FILE": sec.ca_file,
    }


async def test_samples_to_a_decision_on_the_secure_broker(
    kafka_secure: SecureBroker, tmp_path: Path
) -> None:
    b = kafka_secure.bootstrap
    ns = f"sec-{uuid.uuid4().hex[:8]}"
    workload = f"{ns}/Deployment/web"
    cluster = Producer(
        b, client_id="test-cluster", security=kafka_secure.security("cluster-collector")
    )
    await cluster.start()
    await cluster.send(
        events.POLICIES, events.PolicyRecord(policy=policy_from_obj(policy_obj(ns, "web")))
    )
    await cluster.send(
        events.WORKLOADS,
        events.WorkloadState(
            workload=workload, spec_replicas=1, ready_replicas=1, observed_at=time.time()
        ),
    )
    services: list[Service] = [
        governor_service(
            "aggregator",
            b,
            {
                **secure_env(kafka_secure, "aggregator"),
                "DATA_DIR": str(tmp_path / "agg"),
                "PUBLISH_INTERVAL_MS": "300",
            },
            tmp_path / "aggregator.log",
        ),
        governor_service(
            "decider", b, secure_env(kafka_secure, "decider"), tmp_path / "decider.log"
        ),
        governor_service(
            "collector",
            b,
            {**secure_env(kafka_secure, "collector"), "HTTP_HOST": "127.0.0.1"},
            tmp_path / "collector.log",
        ),
    ]
    # The viewer only reads: a plain consumer (governor.bus.Consumer would also start a DLQ
    # producer, which a principal without any WRITE may not).
    viewer = AIOKafkaConsumer(
        events.DECISIONS.name,
        bootstrap_servers=b,
        group_id=None,
        auto_offset_reset="latest",
        **aiokafka_options(kafka_secure.security("viewer")),
    )
    decode = codec_for(events.DECISIONS).decode
    try:
        for s in services:
            s.start()
        await viewer.start()
        collector = services[2]
        decision: events.ScaleDecision | None = None
        deadline = time.monotonic() + 90
        async with aiohttp.ClientSession() as http:
            while decision is None and time.monotonic() < deadline:
                now = time.time()
                body = {
                    "samples": [
                        {"workload": workload, "metric": "rps", "value": 150.0, "timestamp": now}
                    ]
                }
                async with http.post(
                    f"http://127.0.0.1:{collector.port}/v1/samples", json=body
                ) as r:
                    assert r.status == 200, await r.text()
                for recs in (await viewer.getmany(timeout_ms=500)).values():
                    for r in recs:
                        d = _decision(decode, r.value)
                        if d is not None and d.workload == workload:
                            decision = d
        assert decision is not None, "no decision within 90 s:\n" + "\n".join(
            s.tail(1500) for s in services
        )
        assert decision.to_replicas > decision.from_replicas == 1, decision
        exposed = [s.metrics() for s in services]
    finally:
        await viewer.stop()
        await cluster.stop()
        for s in services:
            s.stop()
    secrets = {p: kafka_secure.password(p) for p in PRINCIPALS}
    logs = {s.command: s.log_path.read_text(errors="replace") for s in services}
    assert all(logs.values()), "a service wrote no log at all"
    for p, secret in secrets.items():
        assert len(secret) >= 16
        for name, text in logs.items():
            assert secret not in text, f"{p}'s password in {name}'s log"
        for text in exposed:
            assert secret not in text, f"{p}'s password in a /metrics page"
    print(
        f"secure pipeline: decision {decision.from_replicas} -> {decision.to_replicas}; "
        f"{len(secrets)} passwords absent from {sum(len(t) for t in logs.values())} bytes of "
        f"logs and {sum(len(t) for t in exposed)} bytes of metrics"
    )
