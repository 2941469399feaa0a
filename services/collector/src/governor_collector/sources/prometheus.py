"""`prometheus`: a PromQL instant query per workload metric, every `intervalSeconds`.

`GET <serverAddress>/api/v1/query?query=...&time=<now>`; the response is decoded with msgspec
Structs. The query must give one number: a scalar, or a vector with exactly one series (as KEDA's
Prometheus scaler requires). Anything else is an error, never a guess:

* an empty vector -> `empty_result` (KEDA's `ignoreNullValues` would publish 0; governor does not
  invent a zero that would scale a workload down — write `... or vector(0)` if no series means 0);
* several series -> `multiple_series` (aggregate them in the query, e.g. `sum(...)`);
* NaN or ±Inf -> `bad_value`; a matrix or a string -> `bad_result_type`;
* Prometheus unreachable / timing out / answering an error -> `unreachable` / `timeout` /
  `query_error` (with Prometheus' errorType and message).

The sample's timestamp is the evaluation time Prometheus reports (event time).
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec

from governor.events import MetricSample
from governor.spec import PrometheusSource as PrometheusSpec
from governor_collector.sources.base import PullSource, SourceError, register


class QueryData(msgspec.Struct):
    resultType: Literal["vector", "scalar", "matrix", "string"]  # Prometheus' name
    result: msgspec.Raw


class QueryResponse(msgspec.Struct):
    status: Literal["success", "error"]
    data: QueryData | None = None
    errorType: str = ""
    error: str = ""
    warnings: list[str] = msgspec.field(default_factory=list)


class VectorSeries(msgspec.Struct):
    metric: dict[str, str]
    value: tuple[float, str]


_response = msgspec.json.Decoder(QueryResponse)
_vector = msgspec.json.Decoder(list[VectorSeries])
_scalar = msgspec.json.Decoder(tuple[float, str])


def parse_response(body: bytes) -> QueryResponse:
    try:
        return _response.decode(body)
    except msgspec.DecodeError as e:
        raise SourceError("bad_response", f"not a Prometheus API response: {e}") from None


def value_of(resp: QueryResponse) -> tuple[float, float]:
    """(timestamp, value) of an instant query's one number, or SourceError saying why not."""
    if resp.status != "success" or resp.data is None:
        raise SourceError("query_error", f"{resp.errorType or 'error'}: {resp.error}")
    kind = resp.data.resultType
    try:
        if kind == "scalar":
            ts, text = _scalar.decode(resp.data.result)
        elif kind == "vector":
            series = _vector.decode(resp.data.result)
            if not series:
                raise SourceError(
                    "empty_result",
                    "the query returned no series; governor does not publish a made-up 0 "
                    "(append `or vector(0)` to the query if no series means zero)",
                )
            if len(series) > 1:
                shown = ", ".join(str(s.metric) for s in series[:3])
                raise SourceError(
                    "multiple_series",
                    f"the query returned {len(series)} series ({shown}, ...); aggregate them "
                    "into one, e.g. sum(...)",
                )
            ts, text = series[0].value
        else:
            raise SourceError(
                "bad_result_type", f"the query returned a {kind}; it must give a scalar or vector"
            )
    except msgspec.DecodeError as e:
        raise SourceError("bad_response", f"unexpected {kind} result: {e}") from None
    try:
        value = float(text)
    except ValueError:
        raise SourceError("bad_value", f"value {text!r} is not a number") from None
    if not math.isfinite(value):
        raise SourceError("bad_value", f"the query gave {text}, not a finite number")
    return ts, value


@register
class PrometheusSource(PullSource[PrometheusSpec]):
    name = "prometheus"
    config_type = PrometheusSpec

    def _url(self) -> str:
        return self.config.server_address.rstrip("/") + "/api/v1/query"

    async def collect(self, now: float) -> list[MetricSample]:
        params = {"query": self.config.query, "time": f"{now:.3f}"}
        status, body = await self.http_get(
            self._url(), where=self.config.server_address, params=params
        )
        if status >= 500 and not body.startswith(b"{"):
            raise SourceError("http_status", f"HTTP {status} from {self.config.server_address}")
        resp = parse_response(body)
        ts, value = value_of(resp)
        return [self.sample(value, ts, labels={})]
