"""`metrics.k8s.io` served through the real API server's aggregation layer, from the simulated pods.

What metrics-server does for a real cluster, for the demo's simulated one: an HTTPS server on
127.0.0.1 answers `v1beta1` PodMetrics and NodeMetrics (get and list, equality label selectors);
an `APIService` `v1beta1.metrics.k8s.io` points at it through a Service of type ExternalName
`localhost` (the dev control plane has no kube-proxy; see deploy/devcluster/README.md).

- TLS and registration: governor_tools.aggregation (a throw-away CA and serving pair, the
  ExternalName Service and the APIService with the CA in its caBundle).
- Callers: only the API server's front proxy. The server requires a client certificate from the
  request-header CA that the API server publishes in kube-system/extension-apiserver-
  authentication, with a common name from its allowed names; requests without it get 401. The
  user the front proxy forwards (X-Remote-User) is counted, not authorized: there is no delegated
  SubjectAccessReview as metrics-server does (RBAC on `pods.metrics.k8s.io` still applies in the
  API server in front).
- Usage model: a web pod's CPU is its share of the offered load over what it can serve
  (load / ready / C, at most 1) times its CPU request; a training worker runs at 90 % of its
  request. Memory: a base plus a load-proportional part.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from governor.front_proxy import is_front_proxy, server_context
from governor.inventory import parse_selector_string, selector_matches
from governor.kube import Kube
from governor_tools import aggregation
from governor_tools.demo import scenario as sc

log = logging.getLogger("governor.demo.metrics_api")

GROUP_VERSION = "metrics.k8s.io/v1beta1"
APISERVICE = "v1beta1.metrics.k8s.io"
SERVICE = "demo-metrics-server"

# (pod name, namespace, labels, node, container, cpu cores, memory bytes)
PodUsage = tuple[str, str, dict[str, str], str, str, float, float]
UsageFn = Callable[[], list[PodUsage]]


def _cpu(cores: float) -> str:
    return f"{round(cores * 1e9)}n"


def _memory(b: float) -> str:
    return f"{round(b / 1024)}Ki"


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class MetricsServer:
    usage: UsageFn
    folder: Path
    window_s: float = 1.0
    port: int = 0
    ca_bundle: bytes = b""
    requests: int = 0
    rejected: int = 0
    users: set[str] = field(default_factory=set)
    _runner: web.AppRunner | None = None

    # --- payloads -----------------------------------------------------------------------------

    def _pod(self, u: PodUsage, now: float) -> dict[str, Any]:
        name, ns, labels, _, container, cpu, mem = u
        return {
            "kind": "PodMetrics",
            "apiVersion": GROUP_VERSION,
            "metadata": {"name": name, "namespace": ns, "labels": labels,
                         "creationTimestamp": _stamp(now)},
            "timestamp": _stamp(now),
            "window": f"{self.window_s:g}s",
            "containers": [
                {"name": container, "usage": {"cpu": _cpu(cpu), "memory": _memory(mem)}}
            ],
        }  # fmt: skip

    def _nodes(self, now: float) -> dict[str, dict[str, Any]]:
        cpu: dict[str, float] = dict.fromkeys(sc.node_names(), 0.0)
        mem: dict[str, float] = dict.fromkeys(sc.node_names(), 0.0)
        for u in self.usage():
            cpu[u[3]] = cpu.get(u[3], 0.0) + u[5]
            mem[u[3]] = mem.get(u[3], 0.0) + u[6]
        return {
            n: {
                "kind": "NodeMetrics",
                "apiVersion": GROUP_VERSION,
                "metadata": {"name": n, "creationTimestamp": _stamp(now)},
                "timestamp": _stamp(now),
                "window": f"{self.window_s:g}s",
                "usage": {"cpu": _cpu(cpu[n]), "memory": _memory(mem[n])},
            }
            for n in cpu
        }

    # --- HTTP ---------------------------------------------------------------------------------

    @web.middleware
    async def _front_proxy_only(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        if not is_front_proxy(cert, self.allowed_names):
            self.rejected += 1
            return _status(401, "Unauthorized", "a front-proxy client certificate is required")
        self.requests += 1
        user = request.headers.get("X-Remote-User")
        if user:
            self.users.add(user)
        response: web.StreamResponse = await handler(request)
        return response

    allowed_names: frozenset[str] = frozenset()

    async def _discovery(self, request: web.Request) -> web.Response:
        resources = [
            {"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics",
             "verbs": ["get", "list"]},
            {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics",
             "verbs": ["get", "list"]},
        ]  # fmt: skip
        return web.json_response(
            {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
             "resources": resources}
        )  # fmt: skip

    async def _pods(self, request: web.Request) -> web.Response:
        now = time.time()
        ns = request.match_info.get("namespace")
        selector = parse_selector_string(request.query.get("labelSelector", ""))
        items = [
            self._pod(u, now)
            for u in self.usage()
            if (ns is None or u[1] == ns) and selector_matches(selector, u[2])
        ]
        return web.json_response(
            {"kind": "PodMetricsList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}
        )

    async def _pod_one(self, request: web.Request) -> web.Response:
        now = time.time()
        ns, name = request.match_info["namespace"], request.match_info["name"]
        for u in self.usage():
            if u[0] == name and u[1] == ns:
                return web.json_response(self._pod(u, now))
        return _status(404, "NotFound", f'podmetrics.metrics.k8s.io "{name}" not found')

    async def _node_list(self, request: web.Request) -> web.Response:
        items = list(self._nodes(time.time()).values())
        return web.json_response(
            {"kind": "NodeMetricsList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}
        )

    async def _node_one(self, request: web.Request) -> web.Response:
        node = self._nodes(time.time()).get(request.match_info["name"])
        if node is None:
            name = request.match_info["name"]
            return _status(404, "NotFound", f'nodemetrics.metrics.k8s.io "{name}" not found')
        return web.json_response(node)

    async def start(self, front_proxy_ca: str, allowed_names: list[str]) -> None:
        ca, crt, key = await asyncio.to_thread(
            aggregation.local_serving_pair, self.folder, SERVICE, sc.NAMESPACE
        )
        self.ca_bundle = ca.read_bytes()
        self.allowed_names = frozenset(allowed_names)
        ctx = server_context(crt, key, front_proxy_ca)  # checked per request: 401 without one
        app = web.Application(middlewares=[self._front_proxy_only])
        root = f"/apis/{GROUP_VERSION}"
        app.router.add_get(root, self._discovery)
        app.router.add_get(f"{root}/pods", self._pods)
        app.router.add_get(f"{root}/namespaces/{{namespace}}/pods", self._pods)
        app.router.add_get(f"{root}/namespaces/{{namespace}}/pods/{{name}}", self._pod_one)
        app.router.add_get(f"{root}/nodes", self._node_list)
        app.router.add_get(f"{root}/nodes/{{name}}", self._node_one)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=ctx)
        await site.start()
        if self.port == 0 and self._runner.addresses:
            self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
            "message": message, "code": code}  # fmt: skip
    return web.json_response(body, status=code)


async def register(kube: Kube, server: MetricsServer) -> None:
    """The ExternalName Service and the APIService pointing the aggregation layer at `server`."""
    await aggregation.register(
        kube, GROUP_VERSION, namespace=sc.NAMESPACE, service=SERVICE, port=server.port,
        ca_bundle=server.ca_bundle, field_manager="governor-demo",
    )  # fmt: skip


async def wait_available(kube: Kube, timeout_s: float = 60.0) -> bool:
    return await aggregation.wait_available(kube, APISERVICE, timeout_s)
