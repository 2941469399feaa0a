"""`metrics_api`: KEDA's metrics-api scaler — GET a JSON endpoint, publish the number at a path.

`valueLocation` is a dotted path into the JSON body, list items by index (`components.worker.
tasks`, `items.0.count`): the simple subset of the GJSON paths KEDA takes. The value may be a
number or a Kubernetes quantity string ("12", "1.5k"), as KEDA accepts. Credentials come from
environment variables of the collector named in the spec (`authMode` bearer: `tokenFromEnv`;
basic: `usernameFromEnv`/`passwordFromEnv`; apiKey: `apiKeyFromEnv`, sent in the header or the
query parameter `keyParamName`).

Errors: `unreachable`, `timeout`, `http_status` (not 2xx), `bad_response` (not JSON),
`bad_value_location` (the path is not in the body, or is not a number), `credentials` (an env
var is not set).
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp
import msgspec

from governor.events import MetricSample
from governor.inventory import parse_quantity
from governor.spec import MetricsApiSource as MetricsApiSpec
from governor_collector.sources.base import PullSource, SourceError, finite_number, register


def value_at(body: Any, location: str) -> float:
    """The number at `location` (dotted path, list indices as numbers) in a decoded JSON body."""
    node = body
    for part in location.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise SourceError("bad_value_location", f"{location!r}: no {part!r} in the response")
    if isinstance(node, bool) or not isinstance(node, int | float | str):
        raise SourceError("bad_value_location", f"{location!r} is {node!r}, not a number")
    return finite_number(parse_quantity, node, "bad_value_location", f"{location!r} is {node!r}")


def _env(name: str | None, what: str) -> str:
    value = os.environ.get(name or "")
    if not name or value is None:
        raise SourceError("credentials", f"{what}: the environment variable {name!r} is not set")
    return value


def request_auth(spec: MetricsApiSpec) -> tuple[dict[str, str], dict[str, str]]:
    """(headers, query parameters) for the spec's authMode."""
    if spec.auth_mode == "bearer":
        return {"Authorization": f"Bearer {_env(spec.token_from_env, 'tokenFromEnv')}"}, {}
    if spec.auth_mode == "basic":
        user = _env(spec.username_from_env, "usernameFromEnv")
        password = os.environ.get(spec.password_from_env or "", "")
        return {"Authorization": aiohttp.encode_basic_auth(user, password)}, {}
    if spec.auth_mode == "apiKey":
        key = _env(spec.api_key_from_env, "apiKeyFromEnv")
        if spec.method == "query":
            return {}, {spec.key_param_name: key}
        return {spec.key_param_name: key}, {}
    return {}, {}


@register
class MetricsApiSource(PullSource[MetricsApiSpec]):
    name = "metrics_api"
    config_type = MetricsApiSpec

    async def collect(self, now: float) -> list[MetricSample]:
        headers, params = request_auth(self.config)
        url = self.config.url
        status, body = await self.http_get(url, where=url, headers=headers, params=params)
        if not 200 <= status < 300:
            raise SourceError("http_status", f"HTTP {status} from {url}")
        try:
            doc = msgspec.json.decode(body)
        except msgspec.DecodeError as e:
            raise SourceError("bad_response", f"{url} did not answer JSON: {e}") from None
        return [self.sample(value_at(doc, self.config.value_location), now)]
