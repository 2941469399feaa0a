"""Serving an API through the kube-apiserver's aggregation layer from a process on 127.0.0.1.

What the demo's metrics.k8s.io, the demo's governor-metrics-adapter (external.metrics.k8s.io) and
the adapter's tests all do, once:

- `serving_pair`: a throw-away CA and a serving pair it signs (the `openssl` CLI). The aggregator
  checks the name `<service>.<namespace>.svc`, whatever address it dials, and verifies the pair
  with the CA, which goes into the APIService's caBundle.
- `register`: a Service of type ExternalName `localhost` (the dev control plane has no kube-proxy;
  see deploy/devcluster/README.md) and the APIService `<version>.<group>` pointing at it.
- `wait_available`: until the aggregator reports the APIService Available.

The backend itself checks that its caller is the API server's front proxy (governor.front_proxy).
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import subprocess
import time
from pathlib import Path

from governor.kube import Kube

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def serving_pair(folder: Path, dns: str, *sans: str) -> tuple[Path, Path, Path]:
    """(ca.crt, tls.crt, tls.key) in `folder`: the pair for DNS name `dns` plus `sans`
    (openssl's subjectAltName entries, e.g. "DNS:localhost", "IP:127.0.0.1")."""
    if shutil.which("openssl") is None:
        raise FileNotFoundError("openssl not found: install openssl to serve an aggregated API")
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=governor-aggregated-api-ca")  # fmt: skip
    openssl("req", *EC, "-keyout", "tls.key", "-out", "tls.csr", "-subj", f"/CN={dns}")
    (folder / "san.ext").write_text("subjectAltName=" + ",".join([f"DNS:{dns}", *sans]) + "\n")
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "tls.crt", "-days", "2", "-extfile", "san.ext")  # fmt: skip
    return folder / "ca.crt", folder / "tls.crt", folder / "tls.key"


def local_serving_pair(folder: Path, service: str, namespace: str) -> tuple[Path, Path, Path]:
    """The pair for a Service's in-cluster name, localhost and 127.0.0.1."""
    return serving_pair(folder, f"{service}.{namespace}.svc", "DNS:localhost", "IP:127.0.0.1")


async def register(
    kube: Kube,
    group_version: str,
    *,
    namespace: str,
    service: str,
    port: int,
    ca_bundle: bytes,
    field_manager: str,
) -> str:
    """The ExternalName Service and the APIService for `group_version` ("group/version") to a
    server on localhost:`port`; returns the APIService's name."""
    group, version = group_version.split("/")
    await kube.apply(
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": service, "namespace": namespace},
         "spec": {"type": "ExternalName", "externalName": "localhost",
                  "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}},
        field_manager=field_manager,
    )  # fmt: skip
    name = f"{version}.{group}"
    await kube.apply(
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": name},
         "spec": {"group": group, "version": version,
                  "groupPriorityMinimum": 100, "versionPriority": 100,
                  "service": {"namespace": namespace, "name": service, "port": port},
                  "caBundle": base64.b64encode(ca_bundle).decode()}},
        field_manager=field_manager,
    )  # fmt: skip
    return name


async def is_available(kube: Kube, name: str) -> bool:
    obj = await kube.get("apiregistration.k8s.io/v1", "apiservices", name)
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)


async def wait_available(kube: Kube, name: str, timeout_s: float = 60.0) -> bool:
    """True once the APIService `name` is Available, False after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await is_available(kube, name):
            return True
        await asyncio.sleep(0.5)
    return False
