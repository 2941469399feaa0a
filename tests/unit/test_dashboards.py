"""The committed Grafana dashboards are what deploy/grafana/dashboards.py generates, and their
queries name only metrics some governor service defines (docs/metrics.md documents each)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("governor_dashboards", GRAFANA / "dashboards.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _exprs(doc: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def test_committed_dashboards_equal_the_generator_output() -> None:
    rendered = _generator().render()
    assert set(rendered) == {"overview.json", "pipeline.json", "capacity.json"}
    committed = {p.name for p in (GRAFANA / "dashboards").glob("*.json")}
    assert committed == set(rendered), "stale or missing JSON files in deploy/grafana/dashboards"
    for name, text in rendered.items():
        on_disk = (GRAFANA / "dashboards" / name).read_text()
        assert on_disk == text, (
            f"deploy/grafana/dashboards/{name} differs from the generator: "
            "run `uv run python deploy/grafana/dashboards.py` and commit the result"
        )


def test_dashboards_have_unique_uids_a_datasource_variable_and_queries() -> None:
    uids = set()
    for name, text in _generator().render().items():
        doc = json.loads(text)
        uids.add(doc["uid"])
        variables = {v["name"]: v for v in doc["templating"]["list"]}
        assert variables["datasource"]["query"] == "prometheus"
        panels = [p for p in doc["panels"] if p["type"] != "row"]
        assert panels, name
        for p in panels:
            assert p["targets"], f"{name}: panel {p['title']!r} has no query"
            for t in p["targets"]:
                assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
                assert "vector(0)" not in t["expr"] and "absent(" not in t["expr"]
    assert len(uids) == 3


def test_every_queried_metric_is_documented() -> None:
    documented = set(
        re.findall(r"`(governor_[a-z0-9_]+)`", (ROOT / "docs" / "metrics.md").read_text())
    )
    for text in _generator().render().values():
        for expr in _exprs(json.loads(text)):
            for name in re.findall(r"\b(governor_[a-z0-9_]+)", expr):
                base = re.sub(r"_(bucket|count|sum)$", "", name)
                assert name in documented or base in documented, f"{name} not in docs/metrics.md"
