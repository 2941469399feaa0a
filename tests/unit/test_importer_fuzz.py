"""Bad input never crashes the importer: whatever a document holds, each comes back converted,
refused with a reason, or skipped — no exception escapes (hypothesis, on mangled versions of the
corpus' objects and on arbitrary YAML-like values)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from governor.importer import convert_documents

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "import" / "corpus"
OBJECTS = [
    d
    for p in sorted(CORPUS.glob("*.yaml"))
    if not p.name.endswith(".expected.yaml")
    for d in yaml.safe_load_all(p.read_text())
    if isinstance(d, dict) and d.get("kind") in ("HorizontalPodAutoscaler", "ScaledObject")
]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True), st.text(max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, (*prefix, i))
    return out


def replace(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    obj = copy.deepcopy(obj)
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return obj


def check(docs: list[Any]) -> None:
    for o in convert_documents(docs):
        assert o.status in ("converted", "refused", "skipped")
        assert o.status != "refused" or o.reason


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), values)
def test_a_mangled_field_is_a_refusal_or_a_note_never_a_crash(
    data: st.DataObject, value: Any
) -> None:
    obj = data.draw(st.sampled_from(OBJECTS))
    path = data.draw(st.sampled_from(paths(obj)[1:]))
    check([replace(obj, path, value)])


@settings(max_examples=200)
@given(st.lists(values, max_size=3))
def test_arbitrary_documents_never_crash(docs: list[Any]) -> None:
    check(docs)
    check([{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "spec": d} for d in docs])
    check(
        [
            {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "spec": d}
            for d in docs
        ]
    )
