"""The check every aggregated API server makes: is the caller the API server's front proxy?

The kube-apiserver reaches an APIService's backend over TLS with its front-proxy client
certificate (`--proxy-client-cert-file`), signed by the request-header CA and named in the
allowed names it publishes in kube-system/extension-apiserver-authentication
(`requestheader-client-ca-file`, `requestheader-allowed-names`). It has already authenticated and
authorized the user, whom it forwards in `X-Remote-User` / `X-Remote-Group`. A backend that
answers anything else would let any pod that can reach it skip RBAC, so it answers 401.
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

from governor.kube import Kube

AUTH_CONFIGMAP = "extension-apiserver-authentication"


async def front_proxy_trust(kube: Kube) -> tuple[str, list[str]]:
    """The request-header CA (PEM) and the allowed client names the API server publishes
    (reading them needs the kube-system Role `extension-apiserver-authentication-reader`)."""
    cm = await kube.get("v1", "configmaps", AUTH_CONFIGMAP, namespace="kube-system")
    data = cm.get("data") or {}
    ca = str(data.get("requestheader-client-ca-file", ""))
    names = json.loads(data.get("requestheader-allowed-names") or "[]")
    return ca, [str(n) for n in names]


def server_context(cert_file: str | Path, key_file: str | Path, client_ca: str) -> ssl.SSLContext:
    """TLS for the backend: its serving pair, asking (not requiring) a client certificate from
    the request-header CA, so that a caller without one gets a 401 rather than a TLS alert."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_file, key_file)
    ctx.load_verify_locations(cadata=client_ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def is_front_proxy(peercert: dict[str, Any] | None, allowed_names: frozenset[str]) -> bool:
    """Whether a verified peer certificate is the front proxy's: any certificate the CA signed
    when no names are published (the API server's own rule), else one whose CN is allowed."""
    if not peercert:
        return False
    if not allowed_names:
        return True
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value in allowed_names:
                return True
    return False
