"""The push API's OpenAPI 3.1 document, generated from the msgspec types it decodes and answers
with (served at `GET /openapi.json`). The constraints types cannot say (a workload id's shape, a
non-empty metric, a positive timestamp) are added from `sources.push.check_sample`'s rules, so
the document is what the endpoint enforces; tests fuzz the endpoint from it (schemathesis)."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from governor_collector.sources.push import (
    WORKLOAD_PATTERN,
    PushAccepted,
    PushError,
    SampleBatch,
)

REF = "#/components/schemas/{name}"


def _json(ref: dict[str, Any], what: str) -> dict[str, Any]:
    return {"description": what, "content": {"application/json": {"schema": ref}}}


def push_openapi(*, auth: bool) -> dict[str, Any]:
    """The document; `auth`: the endpoint wants a bearer token (401/403 are then answers)."""
    (batch, accepted, error), components = msgspec.json.schema_components(
        [SampleBatch, PushAccepted, PushError], ref_template=REF
    )
    # The `kind` tag ("sample") tells a sample from a MetricBatch on governor.metrics; a pushed
    # sample may leave it out (msgspec reads an untagged sample as one), so it is not required.
    component = components["MetricSample"]
    component["required"] = [f for f in component.get("required", []) if f != "kind"]
    sample = component["properties"]
    sample["workload"]["pattern"] = WORKLOAD_PATTERN
    sample["metric"]["minLength"] = 1
    sample["timestamp"]["exclusiveMinimum"] = 0
    responses = {
        "200": _json(accepted, "every sample acknowledged by Kafka"),
        "400": _json(error, "not JSON, or a sample that is not a MetricSample (path, reason)"),
        "413": _json(error, "the body is over the limit (limit_bytes)"),
        "503": _json(error, "Kafka did not acknowledge, or the collector is stopping; retry"),
    }
    operation: dict[str, Any] = {
        "operationId": "pushSamples",
        "summary": "Publish a batch of samples to governor.metrics, whole or not at all",
        "requestBody": {"required": True, "content": {"application/json": {"schema": batch}}},
        "responses": responses,
    }
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "governor collector push API", "version": "1"},
        "paths": {"/v1/samples": {"post": operation}},
        "components": {"schemas": components},
    }
    if auth:
        responses["401"] = _json(error, "no bearer token, or one that does not authenticate")
        responses["403"] = _json(error, "a sample outside the caller's namespaces (index)")
        operation["security"] = [{"bearer": []}]
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc


def openapi_route(*, auth: bool) -> web.RouteDef:
    """`GET /openapi.json`."""
    document = msgspec.json.encode(push_openapi(auth=auth))

    async def serve(_: web.Request) -> web.Response:
        return web.Response(body=document, content_type="application/json")

    return web.get("/openapi.json", serve)
