"""`push`: samples sent to the collector over HTTP (or produced to the metrics topic directly).

`POST /v1/samples` with `{"samples": [MetricSample, ...]}` (JSON, the MetricSample fields of
`governor.events`: workload, metric, value, timestamp required; unit, source, labels optional).

* The body is decoded with msgspec into the wire types; a bad batch is rejected whole with 400
  and `{"error": "invalid_batch", "path": "$.samples[3].value", "reason": "Expected `float`, got
  `str`", "message": ...}` — msgspec's path names the field. Beyond types: `workload` must be a
  workload id `namespace/kind/name`, `metric` non-empty, `value` and `timestamp` finite,
  timestamp > 0. Not JSON: 400 `malformed_json`.
* A body over the limit (default 1 MiB, setting `push_max_body_bytes`) gets 413 `too_large`,
  decided from Content-Length before reading or while reading a chunked body.
* Nothing of a rejected batch is published. An accepted batch is answered `200 {"accepted": n}`
  only after Kafka acknowledged every sample (acks=all); if Kafka fails, 503 `kafka_unavailable`
  — some samples may have been written, so a retry may duplicate them; consumers tolerate
  duplicates (the aggregator keys samples by workload, metric and timestamp).
* Samples without a `source` get `source: "push"`.

Authentication (setting `push_auth`): `kubernetes` checks the bearer token with a TokenReview and
each namespace of the batch with a SubjectAccessReview (create `scalingpolicies/samples`, group
governor.dev); `tokens_file` maps tokens to namespaces without a cluster; `none` (local play)
takes samples for any workload. No or a bad token: 401 `unauthenticated`; a sample outside the
caller's namespaces: 403 `forbidden` with its `index` and `namespace`, and nothing of the batch
is published; the API server not answering: 503 `auth_unavailable`. Denials are counted in
`governor_collector_push_denials_total{reason}`; the token is never logged. On a secure broker
only the `collector` and `metrics-producer` principals may write the metrics topic directly
(docs/security.md), so the endpoint is the one way in for everyone else. A policy's `push` source
marks its (workload, metric) as expected: `governor_collector_source_up` is 1 for it, and
`governor_collector_push_last_sample_timestamp_seconds{workload,metric}` says when its newest
sample arrived (the decider judges staleness from the samples themselves).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Sequence

import msgspec
from aiohttp import web

from governor.events import MetricSample
from governor.push_auth import Caller, bearer_token, first_denied, namespaces
from governor.spec import PushSource as PushSpec
from governor_collector import metrics
from governor_collector.push_auth import AuthUnavailable, PushAuth
from governor_collector.sources.base import Publisher, PushedSource, register

log = logging.getLogger("governor_collector.push")

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
# A workload id: namespace/kind/name, none empty (the OpenAPI document says the same).
WORKLOAD_PATTERN = r"^[^/]+/[^/]+/[^/]+$"
PUSH_HUB = "push_hub"


class SampleBatch(msgspec.Struct, forbid_unknown_fields=True):
    samples: list[MetricSample]


class PushAccepted(msgspec.Struct):
    accepted: int


class PushError(msgspec.Struct, omit_defaults=True):
    error: str
    message: str
    path: str | None = None
    reason: str | None = None
    limit_bytes: int | None = None
    index: int | None = None  # the first bad sample (400) or the first outside the caller's (403)
    namespace: str | None = None


class BatchRejected(ValueError):
    def __init__(self, status: int, body: PushError) -> None:
        super().__init__(body.message)
        self.status = status
        self.body = body


_decoder = msgspec.json.Decoder(SampleBatch)
_encoder = msgspec.json.Encoder()


_SAMPLE_INDEX = re.compile(r"^\$\.samples\[(\d+)\]")


def _invalid(path: str, reason: str) -> BatchRejected:
    m = _SAMPLE_INDEX.match(path)
    return BatchRejected(
        400,
        PushError(
            "invalid_batch",
            f"{reason} - at `{path}`",
            path=path,
            reason=reason,
            index=int(m.group(1)) if m else None,
        ),
    )


def check_sample(sample: MetricSample, path: str) -> None:
    """What types cannot say: workload id shape, non-empty metric, finite numbers."""
    parts = sample.workload.split("/")
    if len(parts) != 3 or not all(parts):
        raise _invalid(
            f"{path}.workload",
            f"must be a workload id namespace/kind/name, got {sample.workload!r}",
        )
    if not sample.metric:
        raise _invalid(f"{path}.metric", "must not be empty")
    if not math.isfinite(sample.value):
        raise _invalid(f"{path}.value", f"must be a finite number, got {sample.value}")
    if not math.isfinite(sample.timestamp) or sample.timestamp <= 0:
        raise _invalid(f"{path}.timestamp", f"must be epoch seconds > 0, got {sample.timestamp}")


def decode_batch(body: bytes) -> list[MetricSample]:
    """The samples of a push body, or BatchRejected (400) naming the field and why."""
    try:
        batch = _decoder.decode(body)
    except msgspec.ValidationError as e:
        text = str(e)
        reason, _, at = text.rpartition(" - at `")
        if not reason:
            reason, at = text, "$"
        raise _invalid(at.rstrip("`"), reason) from None
    except msgspec.DecodeError as e:
        raise BatchRejected(
            400, PushError("malformed_json", f"the body is not valid JSON: {e}", reason=str(e))
        ) from None
    out = []
    for i, s in enumerate(batch.samples):
        check_sample(s, f"$.samples[{i}]")
        out.append(s if s.source else msgspec.structs.replace(s, source="push"))
    return out


def _answer(status: int, body: msgspec.Struct) -> web.Response:
    """The JSON response, counted in PUSH_REQUESTS by its status."""
    metrics.PUSH_REQUESTS.labels(str(status)).inc()
    return web.Response(status=status, body=_encoder.encode(body), content_type="application/json")


class PushHub:
    """The (workload, metric) pairs some policy expects by push, and when each last arrived."""

    def __init__(self) -> None:
        self.expected: dict[tuple[str, str], int] = {}

    def add(self, workload: str, metric: str) -> None:
        key = (workload, metric)
        self.expected[key] = self.expected.get(key, 0) + 1

    def remove(self, workload: str, metric: str) -> None:
        key = (workload, metric)
        n = self.expected.get(key, 0) - 1
        if n > 0:
            self.expected[key] = n
        else:
            self.expected.pop(key, None)
            metrics.remove_push_last(workload, metric)

    def seen(self, samples: Sequence[MetricSample]) -> None:
        if not self.expected:
            return
        now = time.time()
        for s in samples:
            if (s.workload, s.metric) in self.expected:
                metrics.PUSH_LAST_SAMPLE.labels(s.workload, s.metric).set(now)


async def _read_limited(request: web.Request, limit: int) -> bytes | None:
    """The body, or None when it is over `limit` bytes."""
    if request.content_length is not None and request.content_length > limit:
        return None
    body = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _denied(status: int, reason: str, body: PushError) -> web.Response:
    metrics.PUSH_DENIALS.labels(reason).inc()
    response = _answer(status, body)
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="governor"'
    return response


async def _authenticate(auth: PushAuth, request: web.Request) -> Caller | web.Response:
    token = bearer_token(request.headers.get("Authorization"))
    if token is None:
        return _denied(
            401,
            "missing_token",
            PushError("unauthenticated", "send Authorization: Bearer <token>"),
        )
    try:
        caller = await auth.authenticate(token)
    except AuthUnavailable as e:
        log.warning("push: %s", e)
        return _denied(503, "auth_unavailable", PushError("auth_unavailable", f"{e}; retry"))
    if caller is None:
        return _denied(
            401, "invalid_token", PushError("unauthenticated", "the bearer token is not valid")
        )
    return caller


async def _authorize(
    auth: PushAuth, caller: Caller, samples: Sequence[MetricSample]
) -> web.Response | None:
    workloads = [s.workload for s in samples]
    try:
        granted = await auth.may_push(caller, namespaces(workloads))
    except AuthUnavailable as e:
        log.warning("push: %s", e)
        return _denied(503, "auth_unavailable", PushError("auth_unavailable", f"{e}; retry"))
    denied = first_denied(workloads, lambda ns: granted.get(ns, False))
    if denied is None:
        return None
    log.info(
        "push: %s may not push for namespace %s; batch of %d rejected",
        caller.user,
        denied.namespace,
        len(samples),
    )
    return _denied(
        403,
        "forbidden",
        PushError(
            "forbidden",
            f"{caller.user} may not push samples for namespace {denied.namespace!r} (create "
            f"scalingpolicies/samples); the whole batch was rejected",
            path=f"$.samples[{denied.index}].workload",
            index=denied.index,
            namespace=denied.namespace,
        ),
    )


def push_routes(
    publisher: Publisher,
    hub: PushHub,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    accepting: object = None,
    auth: PushAuth | None = None,
) -> list[web.RouteDef]:
    """The `POST /v1/samples` route. `accepting`, if given, is a callable saying whether the
    collector still takes samples (false while shutting down -> 503). `auth`: who may push for
    which namespaces (None: anyone, for anything)."""

    async def handle(request: web.Request) -> web.Response:
        if callable(accepting) and not accepting():
            return _answer(503, PushError("shutting_down", "the collector is stopping; retry"))
        caller = None
        if auth is not None:
            who = await _authenticate(auth, request)
            if isinstance(who, web.Response):
                return who
            caller = who
        body = await _read_limited(request, max_body_bytes)
        if body is None:
            return _answer(
                413,
                PushError(
                    "too_large",
                    f"the body is over the limit of {max_body_bytes} bytes; send smaller batches",
                    limit_bytes=max_body_bytes,
                ),
            )
        try:
            samples = decode_batch(body)
        except BatchRejected as e:
            return _answer(e.status, e.body)
        if auth is not None and caller is not None:
            refused = await _authorize(auth, caller, samples)
            if refused is not None:
                return refused
        try:
            await publisher.publish(samples)
        except Exception as e:
            log.warning("push: publishing %d samples failed: %s", len(samples), e)
            metrics.SOURCE_ERRORS.labels("push", "publish").inc()
            return _answer(
                503,
                PushError(
                    "kafka_unavailable",
                    f"Kafka did not acknowledge the batch ({type(e).__name__}: {e}); retry",
                ),
            )
        hub.seen(samples)
        metrics.SAMPLES.labels("push").inc(len(samples))
        return _answer(200, PushAccepted(len(samples)))

    return [web.post("/v1/samples", handle)]


@register
class PushMetricSource(PushedSource[PushSpec]):
    """A policy metric fed by push: marks its (workload, metric) as expected."""

    name = "push"
    config_type = PushSpec

    async def _hub(self) -> PushHub:
        async def create() -> PushHub:
            return PushHub()

        return await self.ctx.shared(PUSH_HUB, create)

    async def start(self) -> None:
        (await self._hub()).add(self.target.workload, self.target.metric)

    async def close(self) -> None:
        (await self._hub()).remove(self.target.workload, self.target.metric)
