"""The fence on the real API server: a failed JSON-patch `test` is a 422 the actuator recognises,
and racing writers (two actuators, first write included) always end at the highest seq."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from governor.cores.actuator import fence_lost
from governor.kube import Kube, KubeError
from governor.policy.actuation import ANN_SEQ
from governor_actuator.actuator import Actuator
from governor_actuator.config import ActuatorSettings
from tests.fixtures.kube import governor_kube
from tests.integration.test_actuator_kit import (
    admin,  # noqa: F401 - fixture
    create_namespace,
    decision,
    deployment,
    scaling_policy,
    unique,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def lost(e: KubeError) -> bool:
    """The core's `fence_lost` of what the real API server answered."""
    return fence_lost(e.status, bool(e.details.get("causes")))


@pytest_asyncio.fixture(scope="module")
async def ns(admin: Kube) -> str:  # noqa: F811
    name = unique("fence")
    await create_namespace(admin, name)
    return name


@pytest_asyncio.fixture(scope="module")
async def second_client(kubeconfig_path: Path) -> AsyncIterator[Kube]:
    async with governor_kube(kubeconfig_path) as kube:
        yield kube


async def test_failed_test_op_is_a_recognised_422(admin: Kube, ns: str) -> None:  # noqa: F811
    await admin.apply(deployment(ns, "t422", 1, **{ANN_SEQ: "4"}), field_manager="tests")
    with pytest.raises(KubeError) as err:
        await admin.json_patch(
            "apps/v1",
            "deployments",
            "t422",
            [
                {
                    "op": "test",
                    "path": "/metadata/annotations/governor.dev~1decision-seq",
                    "value": "3",
                },
                {"op": "replace", "path": "/spec/replicas", "value": 9},
            ],
            namespace=ns,
        )
    assert err.value.status == 422 and lost(err.value), err.value
    # the first-write fence: a stale resourceVersion
    with pytest.raises(KubeError) as err:
        await admin.json_patch(
            "apps/v1",
            "deployments",
            "t422",
            [
                {"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
                {"op": "replace", "path": "/spec/replicas", "value": 9},
            ],
            namespace=ns,
        )
    assert lost(err.value), err.value
    obj = await admin.get("apps/v1", "deployments", "t422", namespace=ns)
    assert obj["spec"]["replicas"] == 1
    # a validation error is not a lost fence
    with pytest.raises(KubeError) as err:
        await admin.json_patch(
            "apps/v1",
            "deployments",
            "t422",
            [{"op": "replace", "path": "/spec/replicas", "value": -1}],
            namespace=ns,
        )
    assert err.value.status == 422 and not lost(err.value)


@pytest.mark.parametrize("round_", range(8))
async def test_racing_actuators_end_at_the_highest_seq(
    admin: Kube,  # noqa: F811
    second_client: Kube,
    ns: str,
    round_: int,
) -> None:
    name = f"race-{round_}"
    await admin.apply(deployment(ns, name, 1), field_manager="tests")  # no annotations at all
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    await admin.apply(scaling_policy(ns, name, ref, max_replicas=20), field_manager="tests")
    settings = ActuatorSettings(allowed_namespaces=[ns], events=False, write_status=False)
    one, two = Actuator(admin, settings), Actuator(second_client, settings)
    wl = f"{ns}/Deployment/{name}"
    decisions = [decision(wl, seq, seq + 2, policy=f"{ns}/{name}") for seq in (1, 2, 3, 4)]
    # 1 and 2 race for the first write; 3 and 4 race on the seq-annotation fence
    first = await asyncio.gather(one.handle(decisions[0]), two.handle(decisions[1]))
    second = await asyncio.gather(two.handle(decisions[2]), one.handle(decisions[3]))
    outcomes = [a.outcome for a in (*first, *second)]
    assert all(o in ("applied", "refused") for o in outcomes), [*first, *second]
    for a in (*first, *second):
        if a.outcome == "refused":
            assert a.reason.startswith("stale:"), a
    assert first[1].outcome == "applied" and second[1].outcome == "applied"
    obj = await admin.get("apps/v1", "deployments", name, namespace=ns)
    assert obj["metadata"]["annotations"][ANN_SEQ] == "4"
    assert obj["spec"]["replicas"] == 6
