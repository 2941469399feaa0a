"""The ScalingPolicy CRD's schema is spec.py's model: same fields (camelCase), same required
fields, same enums, the metrics source a union of the tagged types; and the fixtures keep the
upstream field paths governor relies on."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from governor.spec import MetricSource, ScalingPolicySpec

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "deploy" / "k8s" / "crds"


def crd_version(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    (version,) = doc["spec"]["versions"]
    return dict(version)


def spec_schema() -> dict[str, Any]:
    v = crd_version(CRDS / "scalingpolicy.yaml")
    return dict(v["schema"]["openAPIV3Schema"]["properties"]["spec"])


def _struct_types(t: Any) -> list[msgspec.inspect.StructType]:
    info = msgspec.inspect.type_info(t)
    if isinstance(info, msgspec.inspect.StructType):
        return [info]
    if isinstance(info, msgspec.inspect.UnionType):
        return [x for x in info.types if isinstance(x, msgspec.inspect.StructType)]
    return []


def _inner(t: msgspec.inspect.Type) -> msgspec.inspect.Type:
    """Strip Optional."""
    if isinstance(t, msgspec.inspect.UnionType):
        rest = [x for x in t.types if not isinstance(x, msgspec.inspect.NoneType)]
        if len(rest) == 1:
            return rest[0]
    return t


def _literal_values(t: msgspec.inspect.Type) -> set[str] | None:
    t = _inner(t)
    if isinstance(t, msgspec.inspect.LiteralType):
        return {str(v) for v in t.values}
    return None


def compare(schema: dict[str, Any], struct: msgspec.inspect.StructType, path: str) -> list[str]:
    problems: list[str] = []
    props = schema.get("properties", {})
    fields = {f.encode_name: f for f in struct.fields}
    for name in fields.keys() - props.keys():
        problems.append(f"{path}.{name}: in spec.py, missing from the CRD")
    for name in props.keys() - fields.keys():
        problems.append(f"{path}.{name}: in the CRD, not in spec.py")
    required = {f.encode_name for f in struct.fields if f.required}
    if set(schema.get("required", [])) != required:
        problems.append(
            f"{path}: required {sorted(schema.get('required', []))} != {sorted(required)}"
        )
    for name in fields.keys() & props.keys():
        f, sub = fields[name], props[name]
        lit = _literal_values(f.type)
        if lit is not None and set(sub.get("enum", [])) != lit:
            problems.append(f"{path}.{name}: enum {sub.get('enum')} != {sorted(lit)}")
        inner = _inner(f.type)
        if isinstance(inner, msgspec.inspect.StructType):
            problems += compare(sub, inner, f"{path}.{name}")
        elif isinstance(inner, msgspec.inspect.ListType) and isinstance(
            inner.item_type, msgspec.inspect.StructType
        ):
            problems += compare(sub["items"], inner.item_type, f"{path}.{name}[]")
        elif isinstance(inner, msgspec.inspect.IntType):
            if sub.get("type") != "integer":
                problems.append(f"{path}.{name}: int in spec.py, {sub.get('type')} in the CRD")
        elif isinstance(inner, msgspec.inspect.FloatType):
            if sub.get("type") != "number":
                problems.append(f"{path}.{name}: float in spec.py, {sub.get('type')} in the CRD")
        elif isinstance(inner, msgspec.inspect.BoolType) and sub.get("type") != "boolean":
            problems.append(f"{path}.{name}: bool in spec.py, {sub.get('type')} in the CRD")
    return problems


def test_spec_matches_the_model() -> None:
    schema = spec_schema()
    (struct,) = _struct_types(ScalingPolicySpec)
    # the metrics source is a union: compared below
    problems = [p for p in compare(schema, struct, "spec") if ".source" not in p]
    assert problems == []


def test_metric_source_is_the_tagged_union() -> None:
    source = spec_schema()["properties"]["metrics"]["items"]["properties"]["source"]
    variants = _struct_types(MetricSource)
    tags = {str(v.tag) for v in variants}
    assert set(source["properties"]["type"]["enum"]) == tags
    assert source["required"] == ["type"]
    union = {"type"} | {f.encode_name for v in variants for f in v.fields}
    assert set(source["properties"]) == union
    rules = " ".join(r["rule"] for r in source["x-kubernetes-validations"])
    for v in variants:
        for f in v.fields:
            if f.required:
                assert f"has(self.{f.encode_name})" in rules, (v.tag, f.encode_name)
            if f.encode_name != "intervalSeconds":
                # a field of one type is forbidden with the others
                assert f"self.type == '{v.tag}' ||" in rules


def test_status_printer_columns_and_names() -> None:
    v = crd_version(CRDS / "scalingpolicy.yaml")
    doc = yaml.safe_load((CRDS / "scalingpolicy.yaml").read_text())
    assert doc["spec"]["names"]["shortNames"] == ["sp"]
    assert doc["spec"]["scope"] == "Namespaced"
    assert v["subresources"] == {"status": {}}
    status = v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for field in (
        "currentReplicas",
        "desiredReplicas",
        "lastDecisionId",
        "lastDecisionSeq",
        "lastReason",
        "lastTransitionTime",
        "conditions",
    ):
        assert field in status
    columns = {c["name"]: c["jsonPath"] for c in v["additionalPrinterColumns"]}
    assert columns["Target"] == ".spec.targetRef.name"
    assert columns["Min"] == ".spec.minReplicas" and columns["Max"] == ".spec.maxReplicas"
    assert columns["Current"] == ".status.currentReplicas"
    assert columns["Desired"] == ".status.desiredReplicas"
    assert columns["Last Reason"] == ".status.lastReason"
    assert columns["Age"] == ".metadata.creationTimestamp"


@pytest.mark.parametrize(
    ("file", "scale"),
    [
        (
            "pytorchjob.yaml",
            {
                "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
                "statusReplicasPath": ".status.replicaStatuses.Worker.active",
                "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
            },
        ),
        ("volcano-job.yaml", None),
    ],
)
def test_fixture_subresources(file: str, scale: dict[str, str] | None) -> None:
    v = crd_version(CRDS / "testing" / file)
    assert v["subresources"].get("scale") == scale
    assert "status" in v["subresources"]


def test_no_yaml_aliases() -> None:
    """Some tools do not expand YAML anchors/aliases: the manifests use none."""
    for path in [*CRDS.rglob("*.yaml"), *(REPO / "deploy" / "k8s" / "base").rglob("*.yaml")]:
        events = list(yaml.parse(path.read_text()))
        assert not any(isinstance(e, yaml.AliasEvent) for e in events), path


def test_every_literal_of_the_union_is_known() -> None:
    # guards the helper against typing changes
    assert typing.get_origin(MetricSource) in (typing.Union, types.UnionType)
