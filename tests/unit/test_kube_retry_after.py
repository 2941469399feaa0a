"""`Kube.request` waits out an answer that carries Retry-After, as client-go does, and gives up
after its limit; other errors are raised at once. Served by a real HTTP server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client as k8s_client

from governor import kube as kube_mod
from governor.kube import Kube, KubeError


def _status(code: int, reason: str, message: str) -> dict[str, object]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


@pytest.fixture
async def server() -> AsyncIterator[tuple[TestServer, list[int]]]:
    calls: list[int] = []
    answers: dict[str, list[tuple[int, dict[str, str]]]] = {
        # a fresh CRD's storage: twice "not yet", then the list
        "/apis/example.com/v1/widgets": [(429, {"Retry-After": "0.1"})] * 2,
        "/apis/example.com/v1/always": [(429, {"Retry-After": "0.1"})] * 100,
        "/apis/example.com/v1/forbidden": [(403, {})],
        "/apis/example.com/v1/busy": [(503, {})],
    }

    async def handle(request: web.Request) -> web.Response:
        calls.append(1)
        queue = answers.get(request.path, [])
        if queue:
            code, headers = queue.pop(0)
            body = _status(code, "TooManyRequests", "storage is (re)initializing")
            return web.json_response(body, status=code, headers=headers)
        return web.json_response({"kind": "List", "items": [{"metadata": {"name": "a"}}]})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    srv = TestServer(app)
    await srv.start_server()
    yield srv, calls
    await srv.close()


def _kube(srv: TestServer) -> Kube:
    conf = k8s_client.Configuration()
    conf.host = str(srv.make_url("")).rstrip("/")
    return Kube(k8s_client.ApiClient(conf), timeout_s=5)


async def test_retry_after_is_waited_out(server: tuple[TestServer, list[int]]) -> None:
    srv, calls = server
    kube = _kube(srv)
    try:
        doc = await kube.request("GET", "/apis/example.com/v1/widgets")
    finally:
        await kube.api.close()
    assert doc["items"][0]["metadata"]["name"] == "a"
    assert len(calls) == 3


async def test_gives_up_after_the_limit(server: tuple[TestServer, list[int]]) -> None:
    srv, calls = server
    kube = _kube(srv)
    try:
        with pytest.raises(KubeError) as err:
            await kube.request("GET", "/apis/example.com/v1/always")
    finally:
        await kube.api.close()
    assert err.value.status == 429 and err.value.retry_after == pytest.approx(0.1)
    assert len(calls) == kube_mod.RETRY_AFTER_ATTEMPTS


@pytest.mark.parametrize(("path", "code"), [("forbidden", 403), ("busy", 503)])
async def test_other_errors_are_raised_at_once(
    server: tuple[TestServer, list[int]], path: str, code: int
) -> None:
    srv, calls = server
    kube = _kube(srv)
    try:
        with pytest.raises(KubeError) as err:
            await kube.request("GET", f"/apis/example.com/v1/{path}")
    finally:
        await kube.api.close()
    assert err.value.status == code
    assert len(calls) == 1
