"""The `metrics_api` source against a local HTTP server (aiohttp's): the value at a dotted path,
numbers and quantity strings, each authMode's credentials from the collector's environment, and
the errors (status, not JSON, a path not in the body, a server that is not there)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from governor.spec import MetricsApiSource as ApiSpec
from governor_collector.sources import SourceError
from tests.support.http import serving
from tests.support.sources import collect_one, deployment_target

pytestmark = pytest.mark.integration

TARGET = deployment_target("keda", "dummy", "tasks")


class Api:
    """Answers GET /stats with `body`; records each request's headers and query."""

    def __init__(self) -> None:
        self.body: Any = {"components": {"worker": {"tasks": 12}}}
        self.status = 200
        self.seen: list[tuple[dict[str, str], dict[str, str]]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((dict(request.headers), dict(request.query)))
        if isinstance(self.body, bytes):
            return web.Response(body=self.body, status=self.status)
        return web.json_response(self.body, status=self.status)


@pytest.fixture
async def api() -> AsyncIterator[tuple[Api, str]]:
    state = Api()
    async with serving({"/stats": state.handle}) as url:
        yield state, f"{url}/stats"


async def collect(spec: ApiSpec) -> float:
    return (await collect_one(TARGET, spec, 1.0)).value


async def test_value_at_a_path_number_or_quantity(api: tuple[Api, str]) -> None:
    state, url = api
    spec = ApiSpec(url=url, value_location="components.worker.tasks")
    assert await collect(spec) == 12
    state.body = {"components": {"worker": {"tasks": "1.5k"}}}
    assert await collect(spec) == 1500
    state.body = {"items": [{"n": 3}, {"n": 4}]}
    assert await collect(ApiSpec(url=url, value_location="items.1.n")) == 4


@pytest.mark.parametrize(
    ("mode", "env", "header", "query"),
    [
        ("bearer", {"tokenFromEnv": "T"}, ("Authorization", "Bearer s3cret"), None),
        (
            "basic",
            {"usernameFromEnv": "U", "passwordFromEnv": "P"},
            ("Authorization", "Basic dTpzM2NyZXQ="),
            None,
        ),
        ("apiKey", {"apiKeyFromEnv": "K"}, ("X-API-KEY", "s3cret"), None),
        (
            "apiKey",
            {"apiKeyFromEnv": "K", "method": "query", "keyParamName": "api_key"},
            None,
            ("api_key", "s3cret"),
        ),
    ],
)
async def test_credentials_come_from_the_collectors_environment(
    api: tuple[Api, str],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    env: dict[str, str],
    header: tuple[str, str] | None,
    query: tuple[str, str] | None,
) -> None:
    state, url = api
    values = {"T": "s3cret", "U": "u", "P": "s3cret", "K": "s3cret"}
    fields: dict[str, Any] = {}
    for field, var in env.items():
        if field.endswith("FromEnv"):
            monkeypatch.setenv(f"GOVERNOR_TEST_{var}", values[var])
            var = f"GOVERNOR_TEST_{var}"
        fields[field] = var
    import msgspec

    spec = msgspec.convert(
        {"url": url, "valueLocation": "components.worker.tasks", "authMode": mode, **fields},
        ApiSpec,
    )
    assert await collect(spec) == 12
    headers, params = state.seen[-1]
    if header:
        assert headers.get(header[0]) == header[1]
    if query:
        assert params.get(query[0]) == query[1]


async def test_unset_credentials_are_an_error(api: tuple[Api, str]) -> None:
    _, url = api
    spec = ApiSpec(
        url=url, value_location="x", auth_mode="bearer", token_from_env="GOVERNOR_TEST_UNSET"
    )
    with pytest.raises(SourceError) as err:
        await collect(spec)
    assert err.value.reason == "credentials"


async def test_errors_say_what_went_wrong(api: tuple[Api, str]) -> None:
    state, url = api
    spec = ApiSpec(url=url, value_location="components.worker.tasks")
    for body, status, reason in (
        ({"components": {}}, 200, "bad_value_location"),
        ({"components": {"worker": {"tasks": "many"}}}, 200, "bad_value_location"),
        (b"<html>", 200, "bad_response"),
        ({"error": "down"}, 503, "http_status"),
    ):
        state.body, state.status = body, status
        with pytest.raises(SourceError) as err:
            await collect(spec)
        assert err.value.reason == reason, body
    with pytest.raises(SourceError) as err:
        await collect(ApiSpec(url="http://127.0.0.1:1/stats", value_location="x"))
    assert err.value.reason == "unreachable"
