"""`external.metrics.k8s.io/v1beta1` answers from governor's load windows (the pure part).

An HPA's `External` metric names a governor metric and picks the workload and the window with
labels, because workload ids (`namespace/kind/name`) contain '/', which label values cannot:

    metric:
      name: rps                         # the governor metric (MetricSample.metric)
      selector:
        matchLabels:
          governor.dev/kind: Deployment  # with the request's namespace: the workload id
          governor.dev/name: web
          window: stable                 # or panic; default stable
          governor.dev/delay-seconds: "30"   # optional: see below

The value is the window's mean; with `governor.dev/statistic: total` it is, for a per-pod series
(samples labelled `pod`), the mean over the window's instants of the sum across pods
(`governor.pod_totals`): what `sum(rate(...))` gives a stock Prometheus adapter, for an
`AverageValue` target (a series that is not per-pod is its own total).

`delay-seconds` (per metric, else the adapter's `delay_seconds`) serves what the adapter held that
many seconds ago: a stock Prometheus adapter gives an HPA data a scrape interval plus a rule
evaluation old, and an A/B comparison must give the HPA arm the same staleness.

`WindowHistory` keeps, per (workload, metric, window), the windows as they arrived (receive
time, not event time: the delay is about when a scraper would have seen them), for as long as the
largest delay asks. Everything here is pure: `now` is always an argument.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from datetime import UTC, datetime

import msgspec

from governor.events import LoadWindow

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
KIND_LABEL = "governor.dev/kind"
NAME_LABEL = "governor.dev/name"
WINDOW_LABEL = "window"
DELAY_LABEL = "governor.dev/delay-seconds"
STATISTIC_LABEL = "governor.dev/statistic"
WINDOWS = ("stable", "panic")
STATISTICS = ("mean", "total")

Key = tuple[str, str, str]  # (workload, metric, window)


class SelectorError(ValueError):
    """A label selector the adapter cannot answer (the API answers 400 with this text)."""


class ExternalMetricValue(msgspec.Struct, kw_only=True):
    metricName: str
    metricLabels: dict[str, str]
    timestamp: str
    value: str


class ListMeta(msgspec.Struct, kw_only=True):
    pass


class ExternalMetricValueList(msgspec.Struct, kw_only=True):
    items: list[ExternalMetricValue]
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    kind: str = "ExternalMetricValueList"
    apiVersion: str = GROUP_VERSION


class Query(msgspec.Struct, frozen=True, kw_only=True):
    """What one request asks: whose metric, which window, how stale."""

    workload: str
    metric: str
    window: str
    delay_seconds: float | None = None
    statistic: str = "mean"  # or "total": a per-pod series' per-instant total


def parse_selector(selector: str) -> dict[str, str]:
    """Equality terms of a label selector (`a=b`, `a==b`, `a in (b)`), as the HPA sends a
    `matchLabels` (and a single-valued `In` expression)."""
    labels: dict[str, str] = {}
    for raw in _split_terms(selector):
        term = raw.strip()
        if not term:
            continue
        if " in " in term and term.endswith(")"):
            key, _, values = term.partition(" in ")
            options = [v.strip() for v in values.strip().removeprefix("(")[:-1].split(",")]
            if len(options) != 1:
                raise SelectorError(f"{term!r}: only one value per label is supported")
            labels[key.strip()] = options[0]
            continue
        if "!=" in term or "=" not in term:
            raise SelectorError(f"{term!r}: only equality terms (key=value) are supported")
        key, _, value = term.replace("==", "=").partition("=")
        labels[key.strip()] = value.strip()
    return labels


def _split_terms(selector: str) -> list[str]:
    """Commas separate terms, except inside `in (...)`."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return terms


def query_for(namespace: str, metric: str, selector: str) -> Query:
    """The workload, window and delay a request names; SelectorError says what is missing."""
    labels = parse_selector(selector)
    kind, name = labels.get(KIND_LABEL), labels.get(NAME_LABEL)
    if not kind or not name:
        raise SelectorError(
            f"the metric selector must name the workload: labels {KIND_LABEL} and {NAME_LABEL}"
        )
    window = labels.get(WINDOW_LABEL, "stable")
    if window not in WINDOWS:
        raise SelectorError(f"{WINDOW_LABEL}={window!r}: must be one of {', '.join(WINDOWS)}")
    delay: float | None = None
    if DELAY_LABEL in labels:
        try:
            delay = float(labels[DELAY_LABEL])
        except ValueError:
            raise SelectorError(f"{DELAY_LABEL}={labels[DELAY_LABEL]!r}: not a number") from None
        if not math.isfinite(delay) or delay < 0:
            raise SelectorError(f"{DELAY_LABEL}={labels[DELAY_LABEL]!r}: must be ≥ 0")
    statistic = labels.get(STATISTIC_LABEL, "mean")
    if statistic not in STATISTICS:
        raise SelectorError(
            f"{STATISTIC_LABEL}={statistic!r}: must be one of {', '.join(STATISTICS)}"
        )
    return Query(workload=f"{namespace}/{kind}/{name}", metric=metric, window=window,
                 delay_seconds=delay, statistic=statistic)  # fmt: skip


class WindowHistory:
    """The windows of each (workload, metric, window) in arrival order, kept `keep_seconds`."""

    def __init__(self, keep_seconds: float) -> None:
        self.keep_seconds = keep_seconds
        self._seen: dict[Key, list[float]] = {}
        self._windows: dict[Key, list[LoadWindow]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._windows.values())

    def add(self, window: LoadWindow, seen_at: float) -> None:
        key = (window.workload, window.metric.lower(), window.window)
        seen, windows = self._seen.setdefault(key, []), self._windows.setdefault(key, [])
        if seen and seen_at < seen[-1]:
            seen_at = seen[-1]  # arrival order is the order: a clock step back keeps it
        seen.append(seen_at)
        windows.append(window)
        self._expire(key, seen_at)

    def _expire(self, key: Key, now: float) -> None:
        seen, windows = self._seen[key], self._windows[key]
        # Keep the newest window older than the horizon: it is what a delayed read sees.
        cut = bisect.bisect_right(seen, now - self.keep_seconds) - 1
        if cut > 0:
            del seen[:cut], windows[:cut]

    def at(self, key: Key, as_of: float) -> LoadWindow | None:
        """The newest window that had arrived by `as_of`, if any."""
        seen = self._seen.get(key)
        if not seen:
            return None
        i = bisect.bisect_right(seen, as_of)
        return self._windows[key][i - 1] if i else None

    def metrics(self) -> set[str]:
        return {key[1] for key in self._seen}

    def answer(self, q: Query, now: float, default_delay: float) -> LoadWindow | None:
        delay = default_delay if q.delay_seconds is None else q.delay_seconds
        return self.at((q.workload, q.metric.lower(), q.window), now - delay)


def quantity(value: float) -> str:
    """A resource.Quantity for `value`, in milli-units (the HPA compares milli-values)."""
    return f"{round(value * 1000)}m"


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def served(q: Query, w: LoadWindow) -> float:
    """The number a query gets of a window: its mean, or its per-instant total if asked."""
    return w.total_mean if q.statistic == "total" and w.instants else w.mean


def value_list(q: Query, selector: dict[str, str], windows: Iterable[LoadWindow]) -> bytes:
    """The ExternalMetricValueList for `windows` (none: an empty list, which the HPA reports
    as 'no metrics returned', so it never scales on a guess)."""
    items = [
        ExternalMetricValue(metricName=q.metric, metricLabels=selector,
                            timestamp=_stamp(w.end), value=quantity(served(q, w)))
        for w in windows
    ]  # fmt: skip
    return msgspec.json.encode(ExternalMetricValueList(items=items))


class APIResource(msgspec.Struct, kw_only=True):
    name: str
    singularName: str
    namespaced: bool
    kind: str
    verbs: list[str]


class APIResourceList(msgspec.Struct, kw_only=True):
    groupVersion: str
    resources: list[APIResource]
    kind: str = "APIResourceList"
    apiVersion: str = "v1"


def discovery(metrics: Iterable[str]) -> bytes:
    """`GET /apis/external.metrics.k8s.io/v1beta1`: one resource per known metric name."""
    resources = [
        APIResource(name=m, singularName="", namespaced=True, kind="ExternalMetricValueList",
                    verbs=["get"])
        for m in sorted(set(metrics))
    ]  # fmt: skip
    return msgspec.json.encode(APIResourceList(groupVersion=GROUP_VERSION, resources=resources))
