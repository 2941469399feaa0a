"""docs/metrics.md documents every governor metric the services define, with its type, and
nothing that no longer exists; names follow governor_<component>_<thing>_<unit>."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from prometheus_client import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
MODULES = [
    "governor.bus",
    "governor.shell",  # its sinks' retries (governor_bus_emit_retries)
    "governor_collector.metrics",
    "governor.reflector",  # the cluster collector's watches (governor_collector_cluster_watch_*)
    "governor_collector.cluster.collector",
    "governor_aggregator.main",
    "governor_decider.main",
    "governor_actuator.metrics",
]
COMPONENTS = {"bus", "collector", "aggregator", "decider", "actuator"}


def _defined() -> dict[str, str]:
    """Exposed name (counters with _total) -> type, of every governor_* metric."""
    for m in MODULES:
        importlib.import_module(m)
    out = {}
    for family in REGISTRY.collect():
        if family.name.startswith("governor_") and family.name != "governor_test_load":
            name = family.name + "_total" if family.type == "counter" else family.name
            out[name] = family.type
    return out


def _documented() -> dict[str, str]:
    text = (ROOT / "docs" / "metrics.md").read_text()
    return dict(
        re.findall(r"^\| `(governor_[a-z0-9_]+)` \| (counter|gauge|histogram) \|", text, re.M)
    )


def test_every_metric_is_documented_with_its_type() -> None:
    defined, documented = _defined(), _documented()
    assert len(defined) >= 35
    missing = sorted(set(defined) - set(documented))
    assert not missing, f"not in docs/metrics.md: {missing}"
    stale = sorted(set(documented) - set(defined))
    assert not stale, f"documented but not defined: {stale}"
    wrong = {n: (defined[n], documented[n]) for n in defined if defined[n] != documented[n]}
    assert not wrong, wrong


def test_names_follow_the_convention() -> None:
    for name, kind in _defined().items():
        assert name.split("_")[1] in COMPONENTS, name
        if kind == "histogram":
            assert name.endswith("_seconds"), name
