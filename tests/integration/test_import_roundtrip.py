"""Round trip on the real API server: every policy `governor import` makes from the corpus
(tests/fixtures/import/corpus/) is accepted by the dev kube-apiserver with the ScalingPolicy CRD
installed (server-side apply, dry run: the CRD's schema and CEL rules judge it, nothing is
stored). Each goes to the test's own namespace (the corpus' namespaces need not exist)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient

from governor.importer import convert_documents, to_document
from governor.kube import Kube, KubeError

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "deploy" / "k8s" / "crds" / "scalingpolicy.yaml"
CORPUS = REPO / "tests" / "fixtures" / "import" / "corpus"
FIELD_MANAGER = "governor-import-test"


async def install_crd(kube: Kube) -> None:
    crd = yaml.safe_load(CRD.read_text())
    await kube.apply(crd, field_manager=FIELD_MANAGER)
    deadline = time.monotonic() + 60
    while True:
        try:
            await kube.resource("governor.dev/v1alpha1", "ScalingPolicy")
            return
        except KubeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


async def test_every_converted_policy_of_the_corpus_is_accepted(
    kube_api: ApiClient, unique_namespace: str
) -> None:
    kube = Kube(kube_api)
    await install_crd(kube)
    files = sorted(p for p in CORPUS.glob("*.yaml") if not p.name.endswith(".expected.yaml"))
    applied, refused = 0, []
    for path in files:
        for o in convert_documents(yaml.safe_load_all(path.read_text())):
            if o.conversion is None:
                continue
            doc = to_document(o.conversion.policy, namespace_given=True)
            doc["metadata"]["namespace"] = unique_namespace
            try:
                await kube.apply(doc, field_manager=FIELD_MANAGER, dry_run=True)
                applied += 1
            except KubeError as err:
                refused.append(f"{path.name}: {err}")
    assert refused == []
    assert applied >= 30  # the corpus converts most of its 42 objects
    # Dry run: nothing was stored.
    listed = await kube.list_objects(
        "governor.dev/v1alpha1", "scalingpolicies", namespace=unique_namespace
    )
    assert listed == []


async def test_the_dry_run_does_judge_the_new_source_types(
    kube_api: ApiClient, unique_namespace: str
) -> None:
    """The same apply with a field of one source type on another is refused by the CRD's rules:
    the round trip above would have caught a policy the API server rejects."""
    kube = Kube(kube_api)
    await install_crd(kube)
    bad = {
        "apiVersion": "governor.dev/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "bad", "namespace": unique_namespace},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"},
            "maxReplicas": 3,
            "metrics": [
                {
                    "name": "q",
                    "target": {"type": "AverageValue", "averageValue": 5},
                    "source": {"type": "redis", "address": "r:6379", "queueName": "orders"},
                }
            ],
        },
    }
    with pytest.raises(KubeError, match=r"listName and keyName|queueName"):
        await kube.apply(bad, field_manager=FIELD_MANAGER, dry_run=True)
