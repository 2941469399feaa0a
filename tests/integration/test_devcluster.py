"""What governor relies on from a real kube-apiserver, checked against the dev control plane
(deploy/devcluster) or the cluster named by GOVERNOR_TEST_KUBECONFIG.

- /scale on a Deployment and on a CRD with a scale subresource;
- JSON patch with a `test` op — the fencing primitive: a stale `test` is rejected with 422 and
  changes nothing (annotation path `/metadata/annotations/governor.dev~1decision-seq`);
- a watch resumed from a resourceVersion sees later events only;
- RBAC: a less-privileged identity is denied what is not granted and allowed what a Role
  grants, and SubjectAccessReview agrees both times.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiClient, ApiException

from tests.fixtures.kube import KubeIdentities, KubeIdentity, unique_name
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SEQ_ANNOTATION = "governor.dev/decision-seq"
SEQ_PATH = "/metadata/annotations/governor.dev~1decision-seq"  # RFC 6901: "/" -> "~1"
GROUP = "devcluster-test.governor.dev"
VERSION = "v1"
MERGE_PATCH = "application/merge-patch+json"


# RBAC rules and CRDs reach the apiserver's caches asynchronously.
SETTLING = (ApiException, AssertionError)


def deployment(name: str, replicas: int, seq: int) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, annotations={SEQ_ANNOTATION: str(seq)}),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    containers=[client.V1Container(name="app", image="registry.k8s.io/pause:3.10")]
                ),
            ),
        ),
    )


def fenced_patch(old_seq: int, new_seq: int, replicas_path: str, replicas: int) -> list[dict]:
    """The actuator's single request: test the old seq, set replicas, set the new seq."""
    return [
        {"op": "test", "path": SEQ_PATH, "value": str(old_seq)},
        {"op": "replace", "path": replicas_path, "value": replicas},
        {"op": "replace", "path": SEQ_PATH, "value": str(new_seq)},
    ]


@pytest.fixture
def namespace(unique_namespace: str) -> str:
    # Without a controller-manager a deleted namespace stays Terminating: names are unique.
    return unique_namespace


@pytest.fixture
async def scalable_crd(kube_api: ApiClient) -> AsyncIterator[tuple[str, str]]:
    """A namespaced CRD with a scale subresource; yields (plural, kind), deleted afterwards."""
    suffix = unique_name("x").removeprefix("x-")  # CRDs are cluster-scoped: unique per run
    plural, kind = f"widgets{suffix}", f"Widget{suffix.capitalize()}"
    ext = client.ApiextensionsV1Api(kube_api)
    schema = client.V1JSONSchemaProps(
        type="object",
        properties={
            "spec": client.V1JSONSchemaProps(
                type="object",
                properties={"replicas": client.V1JSONSchemaProps(type="integer", minimum=0)},
            ),
            "status": client.V1JSONSchemaProps(
                type="object",
                properties={
                    "replicas": client.V1JSONSchemaProps(type="integer"),
                    "selector": client.V1JSONSchemaProps(type="string"),
                },
            ),
        },
    )
    crd = client.V1CustomResourceDefinition(
        metadata=client.V1ObjectMeta(name=f"{plural}.{GROUP}"),
        spec=client.V1CustomResourceDefinitionSpec(
            group=GROUP,
            scope="Namespaced",
            names=client.V1CustomResourceDefinitionNames(
                plural=plural, singular=f"widget{suffix}", kind=kind
            ),
            versions=[
                client.V1CustomResourceDefinitionVersion(
                    name=VERSION,
                    served=True,
                    storage=True,
                    schema=client.V1CustomResourceValidation(open_apiv3_schema=schema),
                    subresources=client.V1CustomResourceSubresources(
                        status={},
                        scale=client.V1CustomResourceSubresourceScale(
                            spec_replicas_path=".spec.replicas",
                            status_replicas_path=".status.replicas",
                            label_selector_path=".status.selector",
                        ),
                    ),
                )
            ],
        ),
    )
    await ext.create_custom_resource_definition(crd)

    async def established() -> None:
        got = await ext.read_custom_resource_definition(f"{plural}.{GROUP}")
        conds = {c.type: c.status for c in (got.status.conditions or [])}
        assert conds.get("Established") == "True", conds

    await eventually(established, within_s=30, retry_on=SETTLING)
    yield plural, kind
    with contextlib.suppress(ApiException):
        await ext.delete_custom_resource_definition(f"{plural}.{GROUP}")


async def test_deployment_scale_subresource(kube_api: ApiClient, namespace: str) -> None:
    apps = client.AppsV1Api(kube_api)
    await apps.create_namespaced_deployment(namespace, deployment("web", replicas=1, seq=0))

    scale = await apps.patch_namespaced_deployment_scale(
        "web", namespace, {"spec": {"replicas": 3}}, _content_type=MERGE_PATCH
    )
    assert scale.spec.replicas == 3
    assert (await apps.read_namespaced_deployment("web", namespace)).spec.replicas == 3
    assert (await apps.read_namespaced_deployment_scale("web", namespace)).spec.replicas == 3


async def test_custom_resource_scale_subresource(
    kube_api: ApiClient, namespace: str, scalable_crd: tuple[str, str]
) -> None:
    plural, kind = scalable_crd
    custom = client.CustomObjectsApi(kube_api)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": "w"},
        "spec": {"replicas": 1},
    }

    async def create() -> Any:  # the new resource's endpoint may 404 just after Established
        return await custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)

    await eventually(create, within_s=15, retry_on=SETTLING)
    scale = await custom.patch_namespaced_custom_object_scale(
        GROUP,
        VERSION,
        namespace,
        plural,
        "w",
        {"spec": {"replicas": 4}},
        _content_type=MERGE_PATCH,
    )
    assert scale["spec"]["replicas"] == 4
    obj = await custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, "w")
    assert obj["spec"]["replicas"] == 4

    # Fenced JSON patch on the object itself, through the scale subresource's specReplicasPath.
    await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        plural,
        "w",
        [{"op": "add", "path": "/metadata/annotations", "value": {SEQ_ANNOTATION: "7"}}],
    )
    await custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, "w", fenced_patch(7, 8, "/spec/replicas", 6)
    )
    with pytest.raises(ApiException) as stale:
        await custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, "w", fenced_patch(7, 8, "/spec/replicas", 2)
        )
    assert stale.value.status == 422, stale.value
    obj = await custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, "w")
    assert obj["spec"]["replicas"] == 6
    assert obj["metadata"]["annotations"][SEQ_ANNOTATION] == "8"
    scale = await custom.get_namespaced_custom_object_scale(GROUP, VERSION, namespace, plural, "w")
    assert scale["spec"]["replicas"] == 6


async def test_fenced_json_patch_rejects_stale_sequence(
    kube_api: ApiClient, namespace: str
) -> None:
    apps = client.AppsV1Api(kube_api)
    await apps.create_namespaced_deployment(namespace, deployment("api", replicas=2, seq=0))

    # Decision 1 (seq 0 -> 1) wins.
    got = await apps.patch_namespaced_deployment(
        "api", namespace, fenced_patch(0, 1, "/spec/replicas", 5)
    )
    assert got.spec.replicas == 5
    assert got.metadata.annotations[SEQ_ANNOTATION] == "1"

    # A stale writer still believing seq == 0 is rejected with 422 and changes nothing.
    with pytest.raises(ApiException) as stale:
        await apps.patch_namespaced_deployment(
            "api", namespace, fenced_patch(0, 1, "/spec/replicas", 1)
        )
    assert stale.value.status == 422, stale.value
    assert json.loads(stale.value.body)["reason"] == "Invalid"
    now = await apps.read_namespaced_deployment("api", namespace)
    assert now.spec.replicas == 5
    assert now.metadata.annotations[SEQ_ANNOTATION] == "1"

    # The next decision fences on seq 1.
    got = await apps.patch_namespaced_deployment(
        "api", namespace, fenced_patch(1, 2, "/spec/replicas", 4)
    )
    assert (got.spec.replicas, got.metadata.annotations[SEQ_ANNOTATION]) == (4, "2")


async def test_watch_resumes_from_resource_version(kube_api: ApiClient, namespace: str) -> None:
    apps = client.AppsV1Api(kube_api)
    await apps.create_namespaced_deployment(namespace, deployment("before", replicas=1, seq=0))
    listed = await apps.list_namespaced_deployment(namespace)
    rv = listed.metadata.resource_version
    assert [d.metadata.name for d in listed.items] == ["before"]

    # Changes after rv: a new object and a scale of the old one.
    await apps.create_namespaced_deployment(namespace, deployment("after", replicas=1, seq=0))
    await apps.patch_namespaced_deployment_scale(
        "before", namespace, {"spec": {"replicas": 2}}, _content_type=MERGE_PATCH
    )

    seen: list[tuple[str, str, int]] = []
    async with asyncio.timeout(30), watch.Watch() as w:
        async for ev in w.stream(
            apps.list_namespaced_deployment, namespace, resource_version=rv, timeout_seconds=20
        ):
            obj = ev["object"]
            seen.append((ev["type"], obj.metadata.name, obj.spec.replicas))
            if len(seen) == 2:
                break
    # Exactly the two later events, in order; the ADDED of "before" (<= rv) is not replayed.
    assert seen == [("ADDED", "after", 1), ("MODIFIED", "before", 2)]


async def _subject_access_review(
    admin: ApiClient, who: KubeIdentity, namespace: str, verb: str, resource: str, sub: str = ""
) -> bool:
    review = await client.AuthorizationV1Api(admin).create_subject_access_review(
        client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=who.user,
                groups=who.groups,
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace,
                    verb=verb,
                    group="apps",
                    resource=resource,
                    subresource=sub or None,
                    name="app",
                ),
            )
        )
    )
    return bool(review.status.allowed)


@pytest.mark.parametrize("kind", ["ServiceAccount", "User"])
async def test_rbac_least_privilege(
    kube_api: ApiClient, kube_identity: KubeIdentities, namespace: str, kind: str
) -> None:
    if kind == "ServiceAccount":
        who = await kube_identity.service_account(namespace, "scaler")
        subject = client.RbacV1Subject(kind="ServiceAccount", name="scaler", namespace=namespace)
    else:  # a pre-provisioned static-token user of the dev control plane
        who = await kube_identity.devcluster_user("governor-test-1")
        subject = client.RbacV1Subject(
            kind="User", name=who.user, api_group="rbac.authorization.k8s.io"
        )
    admin_apps = client.AppsV1Api(kube_api)
    await admin_apps.create_namespaced_deployment(namespace, deployment("app", replicas=1, seq=0))
    apps = client.AppsV1Api(who.api)

    async def scale_to(n: int) -> client.V1Scale:
        return await apps.patch_namespaced_deployment_scale(
            "app", namespace, {"spec": {"replicas": n}}, _content_type=MERGE_PATCH
        )

    # Nothing granted yet: denied, and SubjectAccessReview agrees.
    with pytest.raises(ApiException) as denied:
        await scale_to(2)
    assert denied.value.status == 403
    assert not await _subject_access_review(
        kube_api, who, namespace, "patch", "deployments", "scale"
    )

    # Grant exactly what the actuator needs on this namespace.
    rbac = client.RbacAuthorizationV1Api(kube_api)
    await rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="scaler"),
            rules=[
                client.V1PolicyRule(api_groups=["apps"], resources=["deployments"], verbs=["get"]),
                client.V1PolicyRule(
                    api_groups=["apps"], resources=["deployments/scale"], verbs=["get", "patch"]
                ),
            ],
        ),
    )
    await rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="scaler"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="scaler"
            ),
            subjects=[subject],
        ),
    )

    scale = await eventually(lambda: scale_to(3), within_s=15, retry_on=SETTLING)
    assert scale.spec.replicas == 3
    assert await _subject_access_review(kube_api, who, namespace, "patch", "deployments", "scale")
    assert (await apps.read_namespaced_deployment("app", namespace)).spec.replicas == 3

    # Still denied: what the Role does not grant.
    with pytest.raises(ApiException) as denied:
        await apps.delete_namespaced_deployment("app", namespace)
    assert denied.value.status == 403
    assert not await _subject_access_review(kube_api, who, namespace, "delete", "deployments")
    with pytest.raises(ApiException) as denied:
        await apps.patch_namespaced_deployment(
            "app", namespace, [{"op": "replace", "path": "/spec/replicas", "value": 9}]
        )
    assert denied.value.status == 403
    assert not await _subject_access_review(kube_api, who, namespace, "patch", "deployments")
    with pytest.raises(ApiException) as denied:
        await apps.list_deployment_for_all_namespaces()
    assert denied.value.status == 403
