"""Nothing is dropped silently: every field of the HPA autoscaling/v2 schema and of KEDA's
ScaledObject v1alpha1 (and of the metadata of each KEDA scaler governor converts) has an entry in
the importer's table: converted, or named in a note with why. The HPA schema comes from the
Kubernetes client's generated models; KEDA's from tests/fixtures/import/schema/ (transcribed from
its Go types and docs). The migration table in docs/scalingpolicy.md is the table's own output.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from governor.importer_fields import (
    HPA_FIELDS,
    KEDA_FIELDS,
    SCALER_FIELDS,
    Field,
    account,
    match,
    migration_table,
)

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "tests" / "fixtures" / "import" / "schema"
# Not configuration: enumerated as one subtree each (their own fields are server-set state).
OPAQUE = {"V1ObjectMeta", "V2HorizontalPodAutoscalerStatus"}


def model_paths(cls: Any, prefix: str = "") -> list[str]:
    """Every leaf path of a Kubernetes client model, `[]` for list items."""
    out: list[str] = []
    for attr, typ in cls.openapi_types.items():
        name = cls.attribute_map[attr]
        path = f"{prefix}.{name}" if prefix else name
        is_list = typ.startswith("list[")
        inner = typ[5:-1] if is_list else typ
        path += "[]" if is_list else ""
        sub = getattr(client, inner, None)
        if sub is not None and hasattr(sub, "openapi_types") and inner not in OPAQUE:
            out += model_paths(sub, path)
        else:
            out.append(path)
    return out


def meta_paths() -> list[str]:
    return [f"metadata.{p}" for p in model_paths(client.V1ObjectMeta)]


def hpa_paths() -> list[str]:
    return [p for p in model_paths(client.V2HorizontalPodAutoscaler) if p != "metadata"] + [
        *meta_paths()
    ]


def keda_paths() -> list[str]:
    lines = (SCHEMA / "scaledobject-v1alpha1.txt").read_text().splitlines()
    paths = [x for x in lines if x and not x.startswith("#") and x != "metadata"]
    behavior = model_paths(
        client.V2HorizontalPodAutoscalerBehavior,
        "spec.advanced.horizontalPodAutoscalerConfig.behavior",
    )
    return paths + behavior + meta_paths()


def scaler_params() -> list[tuple[str, str]]:
    lines = (SCHEMA / "keda-scaler-parameters.txt").read_text().splitlines()
    return [tuple(x.split()) for x in lines if x and not x.startswith("#")]  # type: ignore[misc]


def coverage(paths: list[str], table: tuple[Field, ...]) -> tuple[int, int, list[str]]:
    converted = noted = 0
    silent = []
    for p in paths:
        f = match(table, p)
        if f is None or not (f.governor or f.note):
            silent.append(p)
        elif f.note:
            noted += 1
        else:
            converted += 1
    return converted, noted, silent


@pytest.mark.parametrize(
    ("model", "walk", "fields", "more_than"),
    [
        ("HPA autoscaling/v2", hpa_paths, HPA_FIELDS, 60),
        ("ScaledObject v1alpha1", keda_paths, KEDA_FIELDS, 0),
    ],
)
def test_every_hpa_v2_and_scaled_object_field_is_converted_or_noted(
    model: str,
    walk: Callable[[], list[str]],
    fields: tuple[Field, ...],
    more_than: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths = walk()
    assert len(paths) > more_than  # the model was walked, not an empty list
    converted, noted, silent = coverage(paths, fields)
    with capsys.disabled():
        print(f"\n{model}: {len(paths)} fields, {converted} converted, {noted} noted")
    assert silent == []


def test_every_parameter_of_a_converted_scaler_is_converted_or_noted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    params = scaler_params()
    silent = []
    converted = noted = 0
    for scaler, key in params:
        f = match(SCALER_FIELDS[scaler], key)
        if f is None:
            silent.append(f"{scaler}.{key}")
        elif f.note:
            noted += 1
        else:
            converted += 1
    with capsys.disabled():
        print(f"\nKEDA scaler parameters: {len(params)}, {converted} converted, {noted} noted")
    assert silent == []


def test_an_unknown_field_is_named_not_dropped() -> None:
    notes = account({"spec": {"maxReplicas": 3, "replicaz": 2}}, HPA_FIELDS)
    assert notes == ["spec.replicaz: not a field governor's importer knows: dropped"]


def test_the_docs_migration_table_is_the_tables_output() -> None:
    doc = (REPO / "docs" / "scalingpolicy.md").read_text()
    begin, end = "<!-- migration-table: begin -->\n", "<!-- migration-table: end -->"
    assert begin in doc and end in doc, "docs/scalingpolicy.md lost its migration table markers"
    current = doc.split(begin, 1)[1].split(end, 1)[0]
    assert current == migration_table(), (
        "docs/scalingpolicy.md's migration table is stale: regenerate it with "
        "`uv run governor import --migration-table` between the markers"
    )
