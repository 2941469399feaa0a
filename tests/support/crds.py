"""Install CustomResourceDefinitions on the test API server and wait until they are served."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path

import yaml

from governor.kube import Kube, KubeError

CRD_API = "apiextensions.k8s.io/v1"


async def install_crds(
    kube: Kube,
    paths: Iterable[Path],
    served: Iterable[tuple[str, str]],
    *,
    within: float = 60.0,
) -> None:
    """Create every CRD in `paths` (already there is fine), wait for each to be Established, and
    for each (apiVersion, kind) in `served` to appear in discovery (the collector and actuator
    find kinds that way)."""
    names = []
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            body = {"apiVersion": CRD_API, "kind": "CustomResourceDefinition", **doc}
            try:
                await kube.create(CRD_API, "customresourcedefinitions", body)
            except KubeError as e:
                if e.status != 409:
                    raise
            names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + within
    for name in names:
        while True:
            crd = await kube.get(CRD_API, "customresourcedefinitions", name)
            conds = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
            if conds.get("Established") == "True":
                break
            assert time.monotonic() < deadline, f"CRD {name} not established: {conds}"
            await asyncio.sleep(0.2)
    for api_version, kind in served:
        while True:
            try:
                await Kube(kube.api).resource(api_version, kind)
                break
            except KubeError:
                assert time.monotonic() < deadline, f"{kind} not in discovery"
                await asyncio.sleep(0.2)
