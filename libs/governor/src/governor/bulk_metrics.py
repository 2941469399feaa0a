"""Gauges and counters with thousands of label sets (one or more per workload), cheap to set and
to scrape.

A prometheus_client child's `set` takes a lock, and `generate_latest` formats every sample
again on every scrape (sorting and escaping its labels): at 10,000 workloads and ~9 series each,
a decider's scrape cost it more CPU than anything else it did in that second, on its event loop.
A `BulkMetric` keeps its values in a plain dict and each series' line prefix
(`name{labels} `) rendered once, by the first scrape that shows the series; `render` joins them
with the values. It registers as an ordinary collector (the families `collect` yields have the
same samples a Gauge or Counter would, `_created` aside), so `REGISTRY.get_sample_value` and
anything else reading the registry see it, and `exposition` renders its family from the
prefixes instead of going through `generate_latest` sample by sample.

The child API is the prometheus_client one the services use (`labels(*values)` -> `set`/`inc`,
`remove(*values)`), so a metric moves to this class by its definition alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Literal

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

Kind = Literal["gauge", "counter"]


def _number(value: float) -> str:
    """A sample value in the text format (Prometheus parses Go's float syntax)."""
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _escape(value: str) -> str:
    """A label value in the text format: backslash, double quote and line feed escaped."""
    if "\\" not in value and '"' not in value and "\n" not in value:
        return value  # the usual case, without the three calls
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


class BulkChild:
    """One label set of a BulkMetric (what `labels(...)` returns)."""

    __slots__ = ("_key", "_values")

    def __init__(self, values: dict[tuple[str, ...], float], key: tuple[str, ...]) -> None:
        self._values, self._key = values, key

    def set(self, value: float) -> None:
        self._values[self._key] = float(value)

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        values = self._values
        values[self._key] = values.get(self._key, 0.0) + amount


class BulkFamily(Metric):
    """The family a BulkMetric yields to the registry: its samples on demand, its text
    pre-rendered (`exposition` uses that)."""

    def __init__(self, owner: BulkMetric) -> None:
        super().__init__(owner.name, owner.documentation, owner.kind)
        self.owner = owner

    @property  # type: ignore[override]
    def samples(self) -> list[object]:
        return self.owner.samples()

    @samples.setter
    def samples(self, _: object) -> None:  # Metric.__init__ sets an empty list
        pass


class BulkMetric:
    """A gauge or counter family whose label sets come and go by the thousand."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Iterable[str],
        kind: Kind = "gauge",
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        self.name = name.removesuffix("_total") if kind == "counter" else name
        self.documentation, self.kind = documentation, kind
        self.labelnames = tuple(labelnames)
        self.sample_name = f"{self.name}_total" if kind == "counter" else self.name
        self._values: dict[tuple[str, ...], float] = {}
        self._prefixes: dict[tuple[str, ...], str] = {}
        doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
        self._header = f"# HELP {self.sample_name} {doc}\n# TYPE {self.sample_name} {kind}\n"
        # A series' line prefix: this with its escaped values, made by the first scrape that
        # shows the series. Not by `labels`: a decider's first recommendation of a workload makes
        # ~7 series, and at its start 10,000 workloads' worth come in one burst (2.3 us a series
        # there; docs/performance.md, the start-up bucket).
        name = self.sample_name.replace("%", "%%")
        pairs = ",".join(f'{k.replace("%", "%%")}="%s"' for k in self.labelnames)
        self._prefix = f"{name}{{{pairs}}} "
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> BulkChild:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
        return BulkChild(self._values, values)

    def remove(self, *values: str) -> None:
        self._values.pop(values, None)
        self._prefixes.pop(values, None)

    def clear(self) -> None:
        self._values.clear()
        self._prefixes.clear()

    def samples(self) -> list[object]:
        """The samples a prometheus_client family of this name and type would hold."""
        family = Metric(self.name, self.documentation, self.kind)
        for key, value in self._values.items():
            family.add_sample(self.sample_name, dict(zip(self.labelnames, key, strict=True)), value)
        return list(family.samples)

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, self.kind)]

    def collect(self) -> list[Metric]:
        return [BulkFamily(self)]

    def render(self) -> str:
        """This family in the Prometheus text format."""
        prefixes, template = self._prefixes, self._prefix
        lines = []
        for key, value in self._values.items():
            prefix = prefixes.get(key)
            if prefix is None:
                prefix = prefixes[key] = template % tuple(map(_escape, key))
            lines.append(f"{prefix}{_number(value)}\n")
        return self._header + "".join(lines)


class _One:
    """One family as a collector (what generate_latest takes)."""

    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterator[Metric]:
        yield self.family


def exposition(registry: CollectorRegistry = REGISTRY) -> bytes:
    """`generate_latest(registry)`, with every BulkMetric's family rendered from its cached
    line prefixes."""
    parts: list[bytes] = []
    for family in registry.collect():
        if isinstance(family, BulkFamily):
            parts.append(family.owner.render().encode())
        else:
            parts.append(generate_latest(_One(family)))
    return b"".join(parts)
