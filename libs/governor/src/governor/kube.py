"""Thin kubernetes-asyncio helpers: one way to reach the API server for every service.

* `connect(kubeconfig=None)` -> an `ApiClient`: the kubeconfig file named, else in-cluster
  (a pod's ServiceAccount), else `$KUBECONFIG` / `~/.kube/config`. Close it (`async with`).
* `Kube(api)` speaks to any resource by path, JSON in and out through msgspec (no generated
  models): `get`, `list_objects`, `create`, `delete`, `json_patch`, `merge_patch`, `apply`
  (server-side apply), all with optional `dry_run` (server-side dry run) and `subresource`
  (`status`, `scale`).
* `Kube.resource(api_version, kind)` -> `Resource` (plural, namespaced), from API discovery,
  cached per client. `Kube.crd_scale(group, plural)` -> a CRD's scale subresource paths, cached.
* Errors are `KubeError(status, reason, message, retry_after)`; `status` is the HTTP code (0 for
  a connection failure), `reason` the Status object's reason (`NotFound`, `Conflict`, `Invalid`).

Example::

    async with await connect() as api:
        kube = Kube(api)
        deploy = await kube.get("apps/v1", "deployments", "web", namespace="shop")
        await kube.json_patch("apps/v1", "deployments", "web", [
            {"op": "replace", "path": "/spec/replicas", "value": 3}], namespace="shop")
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, Unpack
from urllib.parse import quote

import aiohttp
import msgspec
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

_json = msgspec.json.Decoder()

# client-go's limit for answers carrying Retry-After; the wait is capped so that a server asking
# for minutes does not hold a caller that has its own deadline.
RETRY_AFTER_ATTEMPTS = 10
_RETRY_AFTER_MAX_S = 5.0


class KubeError(Exception):
    """A failed API call. `status` is the HTTP status (0: no answer), `reason` the Status reason."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        retry_after: float | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.details = dict(details or {})

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def retryable(self) -> bool:
        """429 (throttled), 5xx, or no answer at all."""
        return self.status in (0, 429) or self.status >= 500


class Resource(msgspec.Struct, frozen=True):
    api_version: str
    kind: str
    plural: str
    namespaced: bool


class ScaleSubresource(msgspec.Struct, frozen=True):
    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None


async def connect(kubeconfig: str | Path | None = None, context: str | None = None) -> Any:
    """An ApiClient for the named kubeconfig, else in-cluster, else $KUBECONFIG/~/.kube/config."""
    configuration = k8s_client.Configuration()
    if kubeconfig is not None:
        await k8s_config.load_kube_config(
            config_file=str(kubeconfig), context=context, client_configuration=configuration
        )
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await k8s_config.load_kube_config(context=context, client_configuration=configuration)
    return k8s_client.ApiClient(configuration)


def resource_path(
    api_version: str,
    plural: str,
    name: str | None = None,
    *,
    namespace: str | None = None,
    subresource: str | None = None,
) -> str:
    """`/apis/apps/v1/namespaces/ns/deployments/web/scale` (`/api/v1/...` for the core group)."""
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    parts = [root]
    if namespace:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=""))
        if subresource:
            parts.append(subresource)
    return "/".join(parts)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("Retry-After")
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def _error(status: int, body: bytes, headers: Mapping[str, str]) -> KubeError:
    reason, message = "", body.decode("utf-8", "replace")[:2000]
    details: dict[str, Any] = {}
    try:
        doc = _json.decode(body)
    except msgspec.DecodeError:
        doc = None
    if isinstance(doc, dict):
        reason = str(doc.get("reason", ""))
        message = str(doc.get("message", message))
        details = doc.get("details") or {}
    return KubeError(status, reason, message, retry_after=_retry_after(headers), details=details)


class PatchOptions(TypedDict, total=False):
    """What every kind of patch may name besides the object: keyword arguments of each."""

    namespace: str | None
    subresource: str | None
    dry_run: bool
    field_manager: str | None


class Kube:
    """Any resource by path, JSON through msgspec. See the module docstring."""

    def __init__(self, api: Any, *, timeout_s: float = 30.0) -> None:
        self.api = api
        self.timeout_s = timeout_s
        self._resources: dict[tuple[str, str], Resource] = {}
        self._scales: dict[tuple[str, str], ScaleSubresource | None] = {}

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """One call; returns the decoded JSON answer (None for an empty body).

        An answer that says "not now, try again in N s" (429, or 5xx with Retry-After) is
        retried after N s, up to `RETRY_AFTER_ATTEMPTS` times, as client-go does: the server
        did not act on the request, and a fresh CRD's storage or a restarting API server answer
        so for a second or two."""
        for _ in range(RETRY_AFTER_ATTEMPTS - 1):
            try:
                return await self._request_once(method, path, query, body, content_type)
            except KubeError as e:
                if e.retry_after is None or not (e.status == 429 or e.status >= 500):
                    raise
                await asyncio.sleep(min(max(e.retry_after, 0.1), _RETRY_AFTER_MAX_S))
        return await self._request_once(method, path, query, body, content_type)

    async def _request_once(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: Any,
        content_type: str,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            resp = await self.api.call_api(
                path,
                method,
                query_params=list(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.timeout_s,
            )
        except ApiException as e:  # raised by the client before or instead of an answer
            raise KubeError(int(e.status or 0), str(e.reason or ""), str(e.body or e)) from e
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise KubeError(0, type(e).__name__, str(e) or repr(e)) from e
        try:
            data = await resp.read()
            status = resp.status
            resp_headers = dict(resp.headers)
        finally:
            resp.release()
        if not 200 <= status < 300:
            raise _error(status, data, resp_headers)
        return _json.decode(data) if data else None

    # --- verbs --------------------------------------------------------------------------------

    async def get(
        self,
        api_version: str,
        plural: str,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        path = resource_path(
            api_version, plural, name, namespace=namespace, subresource=subresource
        )
        out: dict[str, Any] = await self.request("GET", path)
        return out

    async def list_objects(
        self,
        api_version: str,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        query = [("labelSelector", label_selector)] if label_selector else []
        path = resource_path(api_version, plural, namespace=namespace)
        doc = await self.request("GET", path, query=query)
        items: list[dict[str, Any]] = doc.get("items") or []
        return items

    async def create(
        self,
        api_version: str,
        plural: str,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        path = resource_path(api_version, plural, namespace=namespace)
        query = [("dryRun", "All")] if dry_run else []
        out: dict[str, Any] = await self.request("POST", path, query=query, body=dict(body))
        return out

    async def delete(
        self, api_version: str, plural: str, name: str, *, namespace: str | None = None
    ) -> None:
        await self.request("DELETE", resource_path(api_version, plural, name, namespace=namespace))

    async def _patch(
        self,
        content_type: str,
        api_version: str,
        plural: str,
        name: str,
        body: Any,
        *,
        force: bool = False,
        **options: Unpack[PatchOptions],
    ) -> dict[str, Any]:
        path = resource_path(
            api_version,
            plural,
            name,
            namespace=options.get("namespace"),
            subresource=options.get("subresource"),
        )
        query: list[tuple[str, str]] = []
        if options.get("dry_run"):
            query.append(("dryRun", "All"))
        if field_manager := options.get("field_manager"):
            query.append(("fieldManager", field_manager))
        if force:
            query.append(("force", "true"))
        out: dict[str, Any] = await self.request(
            "PATCH", path, query=query, body=body, content_type=content_type
        )
        return out

    async def json_patch(
        self,
        api_version: str,
        plural: str,
        name: str,
        ops: Sequence[Mapping[str, Any]],
        **options: Unpack[PatchOptions],
    ) -> dict[str, Any]:
        """RFC 6902 JSON patch. A failed `test` op answers 422 (reason `Invalid`)."""
        body = [dict(op) for op in ops]
        return await self._patch(JSON_PATCH, api_version, plural, name, body, **options)

    async def merge_patch(
        self,
        api_version: str,
        plural: str,
        name: str,
        body: Mapping[str, Any],
        **options: Unpack[PatchOptions],
    ) -> dict[str, Any]:
        """RFC 7386 merge patch (e.g. a status subresource)."""
        return await self._patch(MERGE_PATCH, api_version, plural, name, dict(body), **options)

    async def apply(
        self,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        dry_run: bool = False,
        force: bool = True,
    ) -> dict[str, Any]:
        """Server-side apply of a whole object (its kind resolved by discovery)."""
        api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
        meta = obj.get("metadata") or {}
        res = await self.resource(api_version, kind)
        namespace = (meta.get("namespace") or "default") if res.namespaced else None
        return await self._patch(
            APPLY_PATCH,
            api_version,
            res.plural,
            str(meta["name"]),
            dict(obj),
            force=force,
            namespace=namespace,
            dry_run=dry_run,
            field_manager=field_manager,
        )

    # --- discovery ----------------------------------------------------------------------------

    def forget_discovery(self) -> None:
        """Drop the kinds discovery learnt: the next `resource` asks the API server again (after
        installing CRDs, whose kinds an earlier discovery of their group did not list)."""
        self._resources.clear()

    async def resource(self, api_version: str, kind: str) -> Resource:
        """Plural and scope of a kind, from the API server's discovery (cached)."""
        key = (api_version, kind)
        found = self._resources.get(key)
        if found is not None:
            return found
        root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        doc = await self.request("GET", root)
        for r in doc.get("resources") or []:
            name = str(r.get("name", ""))
            if "/" in name:
                continue
            res = Resource(api_version, str(r.get("kind")), name, bool(r.get("namespaced")))
            self._resources[(api_version, res.kind)] = res
        found = self._resources.get(key)
        if found is None:
            raise KubeError(404, "NotFound", f"no kind {kind} served by {api_version}")
        return found

    async def crd_scale(self, group: str, plural: str) -> ScaleSubresource | None:
        """The scale subresource of the CRD `<plural>.<group>` for its storage version (cached
        per client; None when it has none)."""
        key = (group, plural)
        if key in self._scales:
            return self._scales[key]
        crd = await self.get(
            "apiextensions.k8s.io/v1", "customresourcedefinitions", f"{plural}.{group}"
        )
        found: ScaleSubresource | None = None
        for version in (crd.get("spec") or {}).get("versions") or []:
            scale = (version.get("subresources") or {}).get("scale")
            if scale and (found is None or version.get("storage")):
                found = ScaleSubresource(
                    str(scale["specReplicasPath"]),
                    str(scale["statusReplicasPath"]),
                    scale.get("labelSelectorPath"),
                )
        self._scales[key] = found
        return found
