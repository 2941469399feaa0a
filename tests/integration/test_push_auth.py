"""Authenticated push on the real broker: with a real kube-apiserver (TokenReview +
SubjectAccessReview against the kustomize base's RBAC) and with a tokens file.

The cases, in both modes: a caller granted the namespace is accepted; one not granted gets 403
with the index of its first sample outside its namespaces; no token or a bad one gets 401; a
batch mixing a granted and a refused namespace is rejected whole and writes nothing; every
denial is counted in governor_collector_push_denials_total{reason}.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml

from governor.kube import Kube
from tests.fixtures.kube import governor_kube
from tests.integration.test_actuator_kit import (
    create_namespace,
    service_account_kubeconfig,
    service_account_token,
)
from tests.integration.test_collector import (
    TopicReader,
    gauge,
    running_collector,
    sample_doc,
    uid,
)
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
PUSH_RBAC = REPO / "deploy" / "k8s" / "base" / "rbac-push.yaml"


def denials(reason: str) -> float:
    return gauge("governor_collector_push_denials_total", reason=reason) or 0.0


async def post(
    http: aiohttp.ClientSession, url: str, body: Any, token: str | None
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with http.post(f"{url}/v1/samples", json=body, headers=headers) as r:
        return r.status, await r.json()


async def check_collector(
    kafka_bootstrap: str,
    granted: str,
    refused: str,
    *,
    allowed_ns: str,
    other_ns: str,
    **settings: Any,
) -> None:
    """`check_cases` on a collector run with `settings` (its push authentication)."""
    async with running_collector(kafka_bootstrap, **settings) as c:
        await wait_for(c.ready, what="collector ready")
        async with TopicReader(kafka_bootstrap, c.settings.metrics_topic) as reader:
            await check_cases(
                f"http://127.0.0.1:{c.port}",
                reader,
                granted,
                refused,
                allowed_ns=allowed_ns,
                other_ns=other_ns,
            )


async def check_cases(
    url: str,
    reader: TopicReader,
    granted: str,
    refused: str,
    *,
    allowed_ns: str,
    other_ns: str,
) -> None:
    """The must-show cases: `granted` may push for `allowed_ns` only, `refused` for nothing."""
    mine = f"{allowed_ns}/Deployment/web-{uid()}"
    theirs = f"{other_ns}/Deployment/web-{uid()}"
    before = {r: denials(r) for r in ("missing_token", "invalid_token", "forbidden")}
    async with aiohttp.ClientSession() as http:
        status, doc = await post(http, url, {"samples": [sample_doc(mine, 0)]}, None)
        assert (status, doc["error"]) == (401, "unauthenticated"), doc
        status, doc = await post(
            http, url, {"samples": [sample_doc(mine, 0)]}, "not-a-token-" + uid()
        )
        assert (status, doc["error"]) == (401, "unauthenticated"), doc

        status, doc = await post(http, url, {"samples": [sample_doc(mine, 1)]}, refused)
        assert status == 403 and doc["index"] == 0 and doc["namespace"] == allowed_ns, doc

        mixed = {"samples": [sample_doc(mine, 2), sample_doc(mine, 3), sample_doc(theirs, 4)]}
        status, doc = await post(http, url, mixed, granted)
        assert status == 403, doc
        assert (doc["error"], doc["index"], doc["namespace"]) == ("forbidden", 2, other_ns)
        assert doc["path"] == "$.samples[2].workload"

        ok = {"samples": [sample_doc(mine, 5), sample_doc(mine, 6)]}
        status, doc = await post(http, url, ok, granted)
        assert (status, doc) == (200, {"accepted": 2})
    await reader.caught_up()
    # only the accepted batch is on the topic: the refused and the mixed one wrote nothing
    assert sorted(s.value for s in reader.samples) == [5.0, 6.0]
    assert denials("missing_token") == before["missing_token"] + 1
    assert denials("invalid_token") == before["invalid_token"] + 1
    assert denials("forbidden") == before["forbidden"] + 2


async def test_push_auth_with_a_tokens_file(kafka_bootstrap: str, tmp_path: Path) -> None:
    granted, refused = f"tok-granted-{uid()}", f"tok-refused-{uid()}"
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        yaml.safe_dump(
            {
                "tokens": [
                    {"name": "app-a", "token": granted, "namespaces": ["team-a"]},
                    {"name": "app-b", "token": refused, "namespaces": ["team-b"]},
                ]
            }
        )
    )
    await check_collector(
        kafka_bootstrap,
        granted,
        refused,
        allowed_ns="team-a",
        other_ns="team-c",
        push_auth="tokens_file",
        push_tokens_file=str(tokens),
    )


# --- the real kube-apiserver -----------------------------------------------------------------


@pytest_asyncio.fixture(scope="module")
async def kube_admin(kubeconfig_path: Path) -> AsyncIterator[Kube]:
    async with governor_kube(kubeconfig_path) as kube:
        yield kube


async def sa_token(kube: Kube, namespace: str, name: str) -> str:
    await kube.create(
        "v1",
        "serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        namespace=namespace,
    )
    return await service_account_token(kube, namespace, name)


async def install_push_rbac(kube: Kube, collector_ns: str, app_ns: str, app_sa: str) -> None:
    """The base's rbac-push.yaml, with the collector's ServiceAccount in `collector_ns` and the
    ClusterRole bound in `app_ns` to `app_sa` (what the README tells users to do)."""
    suffix = uid()
    for doc in yaml.safe_load_all(PUSH_RBAC.read_text()):
        doc["metadata"]["name"] += f"-{suffix}"
        if doc["kind"] == "ClusterRoleBinding":
            doc["subjects"][0]["namespace"] = collector_ns
            await kube.create("rbac.authorization.k8s.io/v1", "clusterrolebindings", doc)
        else:
            role = doc["metadata"]["name"]
            await kube.create("rbac.authorization.k8s.io/v1", "clusterroles", doc)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"push-{suffix}", "namespace": app_ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": app_sa, "namespace": app_ns}],
    }
    await kube.create("rbac.authorization.k8s.io/v1", "rolebindings", binding, namespace=app_ns)


async def test_push_auth_on_the_real_kube_apiserver(
    kafka_bootstrap: str, kube_admin: Kube, kubeconfig_path: Path, tmp_path: Path
) -> None:
    system_ns, app_ns, other_ns = (f"{p}-{uid()}" for p in ("gov", "app", "other"))
    for ns in (system_ns, app_ns, other_ns):
        await create_namespace(kube_admin, ns)
    await sa_token(kube_admin, system_ns, "governor-collector")
    granted = await sa_token(kube_admin, app_ns, "pusher")
    refused = await sa_token(kube_admin, app_ns, "stranger")
    await install_push_rbac(kube_admin, system_ns, app_ns, "pusher")
    # The collector runs as its own ServiceAccount, which may only review (auth-delegator).
    kubeconfig = await service_account_kubeconfig(
        kube_admin,
        kubeconfig_path,
        tmp_path / "collector.kubeconfig",
        namespace=system_ns,
        name="governor-collector",
    )
    await check_collector(
        kafka_bootstrap,
        granted,
        refused,
        allowed_ns=app_ns,
        other_ns=other_ns,
        push_auth="kubernetes",
        kubeconfig=str(kubeconfig),
    )
