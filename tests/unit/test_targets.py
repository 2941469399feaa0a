"""governor.targets: which kind reads a target, where each kind's replicas live."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor import targets
from governor.spec import TargetRef
from governor.targets.apps import APPS
from governor.targets.scalable_crd import PYTORCHJOB, SCALABLE_CRD
from governor.targets.volcano import VOLCANO_JOB


def ref(api_version: str, kind: str, **kw: str) -> TargetRef:
    return TargetRef(api_version=api_version, kind=kind, name="x", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("api_version", "kind", "reader"),
    [
        ("apps/v1", "Deployment", APPS),
        ("apps/v1", "StatefulSet", APPS),
        ("apps/v1", "ReplicaSet", APPS),
        ("kubeflow.org/v1", "PyTorchJob", PYTORCHJOB),
        ("batch.volcano.sh/v1alpha1", "Job", VOLCANO_JOB),
        ("batch/v1", "Job", SCALABLE_CRD),
        ("example.com/v1", "Deployment", SCALABLE_CRD),
    ],
)
def test_each_target_has_one_reader(api_version: str, kind: str, reader: object) -> None:
    assert targets.kind_of(ref(api_version, kind)) is reader
    assert targets.target_kind(api_version, kind) == targets.kind_of(ref(api_version, kind)).name


def test_where_the_replicas_live() -> None:
    assert APPS.replicas_pointer(ref("apps/v1", "Deployment")) == "/spec/replicas"
    assert not APPS.needs_scale_subresource(ref("apps/v1", "Deployment"))
    crd = ref("example.com/v1", "Thing")
    assert SCALABLE_CRD.needs_scale_subresource(crd)
    assert SCALABLE_CRD.replicas_pointer(crd, None) is None  # no scale subresource
    assert SCALABLE_CRD.replicas_pointer(crd, ".spec.size") == "/spec/size"
    job = ref("kubeflow.org/v1", "PyTorchJob")
    assert PYTORCHJOB.replicas_pointer(job, ".spec.pytorchReplicaSpecs.Worker.replicas") == (
        "/spec/pytorchReplicaSpecs/Worker/replicas"
    )
    named = ref("example.com/v1", "Thing", spec_replicas_path=".spec.workers")
    assert not SCALABLE_CRD.needs_scale_subresource(named)
    assert SCALABLE_CRD.replicas_pointer(named, ".spec.size") == "/spec/workers"
    volcano = ref("batch.volcano.sh/v1alpha1", "Job", task="worker")
    assert VOLCANO_JOB.replicas_pointer(volcano) is None  # the task's index is in the object
    assert VOLCANO_JOB.task_pointer(2) == "/spec/tasks/2/replicas"


def test_a_reader_names_the_object_it_cannot_read() -> None:
    from governor.inventory import InventoryError

    with pytest.raises(InventoryError, match="Job ns/x: no task 'worker'"):
        VOLCANO_JOB.read(
            ref("batch.volcano.sh/v1alpha1", "Job", task="worker"),
            {"spec": {"tasks": [{"name": "ps", "replicas": 1}]}},
            "Job ns/x",
        )


@given(
    st.lists(
        st.text(st.characters(codec="ascii", exclude_characters="."), min_size=1),
        min_size=1,
        max_size=5,
    )
)
def test_a_dotted_path_and_its_pointer_name_the_same_place(parts: list[str]) -> None:
    from governor.targets.base import dig, path_segments

    pointer = targets.to_pointer("." + ".".join(parts))
    assert path_segments(pointer) == parts
    obj: object = 7
    for p in reversed(parts):
        obj = {p: obj}
    assert dig(obj, path_segments(pointer)) == 7


def test_only_a_queued_kind_names_a_queue_and_only_a_volcano_job_needs_a_task() -> None:
    from governor.spec import PolicyError, TargetRef
    from governor.targets import KINDS, kind_of

    job = TargetRef(kind="Job", name="train", api_version="batch.volcano.sh/v1alpha1")
    assert kind_of(job).queued and kind_of(job).missing(job) == (
        "targetRef.task",
        "a Volcano Job target must name the task to scale",
    )
    with_task = msgspec.structs.replace(job, task="worker")
    assert kind_of(with_task).missing(with_task) is None
    deploy = TargetRef(kind="Deployment", name="web")
    assert not kind_of(deploy).queued and kind_of(deploy).missing(deploy) is None
    assert [k.name for k in KINDS if k.queued] == ["volcano"]
    err = PolicyError(*kind_of(job).missing(job) or ("", ""))
    assert err.path == "targetRef.task"
