"""The kustomize base on the real API server: it applies (server-side dry run), and its RBAC is
least privilege, proven with SubjectAccessReviews for the ServiceAccounts it creates."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_asyncio
import yaml

from governor.kube import Kube
from tests.integration.test_actuator_kit import (
    BASE,
    SYSTEM_NS,
    admin,  # noqa: F401 - fixture
    apply_all,
    create_namespace,
    ident,
    install_base_rbac,
    kubectl_kustomize,
    render_base,
    render_kustomization,
    unique,
)
from tests.support.ci import unavailable

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SA = f"system:serviceaccount:{SYSTEM_NS}:governor-actuator"


def groups(sa_ns: str = SYSTEM_NS) -> list[str]:
    return ["system:serviceaccounts", f"system:serviceaccounts:{sa_ns}", "system:authenticated"]


async def can(
    kube: Kube,
    user: str,
    verb: str,
    resource: str,
    *,
    namespace: str | None = None,
    group: str = "",
    subresource: str = "",
    name: str = "",
) -> bool:
    attrs: dict[str, Any] = {"verb": verb, "resource": resource, "group": group}
    if namespace:
        attrs["namespace"] = namespace
    if subresource:
        attrs["subresource"] = subresource
    if name:
        attrs["name"] = name
    review = await kube.create(
        "authorization.k8s.io/v1",
        "subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups(), "resourceAttributes": attrs},
        },
    )
    return bool(review["status"].get("allowed"))


@pytest_asyncio.fixture(scope="module")
async def allowed_ns(admin: Kube) -> str:  # noqa: F811
    ns = unique("rbac")
    await create_namespace(admin, ns)
    await install_base_rbac(admin, [ns])
    return ns


def test_python_renderer_matches_kubectl_kustomize() -> None:
    ours = render_kustomization(BASE)
    theirs = kubectl_kustomize(BASE)
    if theirs is None:
        unavailable("kubectl not on PATH: nothing to compare the small renderer with")
    assert sorted(map(ident, ours)) == sorted(map(ident, theirs))
    by_id = {ident(o): o for o in theirs}
    for obj in ours:
        other = by_id[ident(obj)]
        for key in ("rules", "roleRef", "subjects", "data", "spec"):
            assert obj.get(key) == other.get(key), (ident(obj), key)


def test_allowed_namespaces_agree_with_the_actuator_config() -> None:
    objs = render_base()
    bound = {
        o["metadata"]["namespace"]
        for o in objs
        if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == "governor-actuator-targets"
    }
    config = next(o for o in objs if o["kind"] == "ConfigMap")
    actuator = yaml.safe_load(config["data"]["actuator.yaml"])
    assert bound == set(actuator["allowed_namespaces"]) == {"default"}
    deployments = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}
    assert set(deployments) == {
        f"governor-{s}"
        for s in (
            "collector",
            "cluster-collector",
            "aggregator",
            "decider",
            "actuator",
            "metrics-adapter",
        )
    }
    for name, d in deployments.items():
        (c,) = d["spec"]["template"]["spec"]["containers"]
        assert c["image"] == "governor:latest" and c["command"] == [name]
        assert d["spec"]["template"]["spec"]["serviceAccountName"] == name


async def test_base_applies_with_server_side_dry_run(admin: Kube) -> None:  # noqa: F811
    objs = render_base()
    kinds = {o["kind"] for o in objs}
    assert {
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
    } <= kinds
    # governor-system must exist for the namespaced objects' dry run; it is the base's own
    await create_namespace(admin, SYSTEM_NS)
    await apply_all(admin, objs, dry_run=True)


# What the actuator's ServiceAccount may do in the namespaces it is allowed: (verb, resource,
# API group, subresource).
MAY_IN_ALLOWED = [
    ("get", "deployments", "apps", ""),
    ("patch", "deployments", "apps", ""),
    ("patch", "statefulsets", "apps", ""),
    ("patch", "deployments", "apps", "scale"),
    ("get", "statefulsets", "apps", "scale"),
    ("patch", "pytorchjobs", "kubeflow.org", ""),
    ("get", "jobs", "batch.volcano.sh", ""),
    ("patch", "jobs", "batch.volcano.sh", ""),
    ("get", "scalingpolicies", "governor.dev", ""),
    ("list", "scalingpolicies", "governor.dev", ""),
    ("watch", "scalingpolicies", "governor.dev", ""),
    ("update", "scalingpolicies", "governor.dev", "status"),
    ("patch", "scalingpolicies", "governor.dev", "status"),
    ("list", "horizontalpodautoscalers", "autoscaling", ""),
    ("list", "scaledobjects", "keda.sh", ""),
    ("create", "events", "", ""),
]
# What it may not do, and where: "allowed" (a namespace it is allowed), "system" (its own),
# "elsewhere" (another), "cluster" (cluster-scoped).
MAY_NOT = [
    ("delete", "pods", "", "", "allowed"),
    ("create", "pods", "", "", "allowed"),
    ("get", "secrets", "", "", "allowed"),
    ("list", "secrets", "", "", "system"),
    ("get", "secrets", "", "", "cluster"),
    ("delete", "deployments", "apps", "", "allowed"),
    ("update", "deployments", "apps", "", "allowed"),
    ("create", "deployments", "apps", "", "allowed"),
    ("patch", "jobs", "batch", "", "allowed"),
    ("update", "scalingpolicies", "governor.dev", "", "allowed"),
    ("delete", "scalingpolicies", "governor.dev", "", "allowed"),
    ("patch", "horizontalpodautoscalers", "autoscaling", "", "allowed"),
    ("patch", "deployments", "apps", "", "elsewhere"),
    ("get", "deployments", "apps", "", "elsewhere"),
    ("patch", "deployments", "apps", "", "system"),
    ("create", "events", "", "", "elsewhere"),
    ("list", "scalingpolicies", "governor.dev", "", "cluster"),
    ("patch", "nodes", "", "", "cluster"),
    ("list", "customresourcedefinitions", "apiextensions.k8s.io", "", "cluster"),
    ("create", "rolebindings", "rbac.authorization.k8s.io", "", "allowed"),
]


@pytest.mark.parametrize(
    ("verb", "resource", "group", "subresource", "where", "may"),
    [*[(*case, "allowed", True) for case in MAY_IN_ALLOWED], *[(*c, False) for c in MAY_NOT]],
)
async def test_actuator_may_exactly_what_its_role_grants(
    admin: Kube,  # noqa: F811
    allowed_ns: str,
    verb: str,
    resource: str,
    group: str,
    subresource: str,
    where: str,
    may: bool,
) -> None:
    namespace = {"allowed": allowed_ns, "system": SYSTEM_NS, "elsewhere": "kube-system"}.get(where)
    allowed = await can(
        admin, SA, verb, resource, namespace=namespace, group=group, subresource=subresource
    )
    assert allowed is may


async def test_actuator_reads_only_the_named_crds(admin: Kube, allowed_ns: str) -> None:  # noqa: F811
    crds = dict(resource="customresourcedefinitions", group="apiextensions.k8s.io")
    assert await can(admin, SA, "get", name="pytorchjobs.kubeflow.org", **crds)
    assert not await can(admin, SA, "get", name="secrets.example.com", **crds)
    assert not await can(admin, SA, "update", name="pytorchjobs.kubeflow.org", **crds)


async def test_other_services(admin: Kube, allowed_ns: str) -> None:  # noqa: F811
    for sa in ("governor-collector", "governor-cluster-collector"):
        collector = f"system:serviceaccount:{SYSTEM_NS}:{sa}"
        assert await can(admin, collector, "list", "pods")
        assert await can(admin, collector, "watch", "scalingpolicies", group="governor.dev")
        assert not await can(
            admin, collector, "patch", "deployments", group="apps", namespace=allowed_ns
        )
        assert not await can(admin, collector, "get", "secrets", namespace=allowed_ns)
    # the cluster collectors' leader Lease: theirs to write, in their namespace only
    cc = f"system:serviceaccount:{SYSTEM_NS}:governor-cluster-collector"
    lease = dict(group="coordination.k8s.io", namespace=SYSTEM_NS)
    assert await can(admin, cc, "update", "leases", name="governor-cluster-collector", **lease)
    assert await can(admin, cc, "create", "leases", **lease)
    assert not await can(admin, cc, "update", "leases", name="kube-scheduler", **lease)
    assert not await can(
        admin, cc, "update", "leases", group="coordination.k8s.io", namespace=allowed_ns
    )
    assert not await can(
        admin, f"system:serviceaccount:{SYSTEM_NS}:governor-collector", "create", "leases", **lease
    )
    for svc in ("aggregator", "decider"):
        user = f"system:serviceaccount:{SYSTEM_NS}:governor-{svc}"
        assert not await can(admin, user, "list", "pods")
        assert not await can(
            admin, user, "get", "scalingpolicies", group="governor.dev", namespace=allowed_ns
        )
