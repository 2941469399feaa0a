"""The one small interface every kind of scale target implements, and what the kinds share.

A kind says where a target's replicas live and what governor reads of it: `read(ref, obj)` turns
the object (decoded JSON) into a `TargetView` (replicas, readiness, selector, pod template,
priority class, restarts), `selector` is the pods it manages, `replicas_pointer` is the JSON
pointer a decision's patch sets. The collector reads targets through `read`; the actuator
patches through `replicas_pointer`. One file per kind: apps.py, scalable_crd.py, volcano.py.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, TypeVar

import msgspec

from governor.inventory.names import InventoryError
from governor.inventory.objects import LabelSelector, PodTemplate
from governor.spec import TargetRef


@dataclass(frozen=True)
class TargetView:
    """What governor reads of a scaling target, whatever its kind."""

    spec_replicas: int
    # From the target's status; None when the status does not say (no controller yet).
    status_ready: int | None
    selector: LabelSelector | None
    template: PodTemplate | None
    priority_class: str = ""
    restarts: int = 0
    started_at: float | None = None


class TaskReplicas(msgspec.Struct, frozen=True):
    """One named task of a target whose replicas are split into tasks (a Volcano Job)."""

    name: str
    replicas: int | None
    min_available: int | None


class Tasks(msgspec.Struct, frozen=True):
    """A tasked target's tasks as read from the object, and where the policy's task is."""

    index: int  # of the policy's task (`targetRef.task`)
    tasks: tuple[TaskReplicas, ...]
    min_available: int | None  # the whole object's minAvailable (a gang over all tasks)
    pointer: str  # JSON pointer of the policy's task's replicas


class TargetKind(abc.ABC):
    """One kind of scale target (a Deployment, a CRD with a scale subresource, ...)."""

    name: ClassVar[str]
    # Whether its objects are submitted to a scheduling queue (`governor.quotas.job_queue`),
    # whose capability then constrains the workload's allocation.
    queued: ClassVar[bool] = False

    @abc.abstractmethod
    def matches(self, group: str, kind: str) -> bool:
        """Whether this reader applies to `kind` of API group `group`."""

    @abc.abstractmethod
    def read(self, ref: TargetRef, obj: Mapping[str, Any], name: str) -> TargetView:
        """The target object as governor sees it; `InventoryError` naming `name` when the object
        is not one of this kind."""

    def selector(self, ref: TargetRef, obj: Mapping[str, Any], name: str) -> LabelSelector | None:
        """The pods the target manages."""
        return self.read(ref, obj, name).selector

    def missing(self, ref: TargetRef) -> tuple[str, str] | None:
        """What a ScalingPolicy's targetRef of this kind lacks: (its field, the fix), or None."""
        return None

    def needs_scale_subresource(self, ref: TargetRef) -> bool:
        """Whether the replicas' path comes from the CRD's scale subresource (the caller reads
        the CRD and passes its specReplicasPath to `replicas_pointer`)."""
        return False

    def tasks(self, ref: TargetRef, obj: Mapping[str, Any]) -> Tasks | str | None:
        """For a kind whose replicas are one named task of several: the object's tasks, or why
        `ref`'s task is not among them; None for a kind without tasks."""
        return None

    def moves_min_available(self, ref: TargetRef) -> bool:
        """Whether a decision may set the object's minAvailable for this `ref`."""
        return False

    def min_available(
        self, ref: TargetRef, tasks: Tasks, to_replicas: int, wanted: int | None, new_total: int
    ) -> int | str | None:
        """The object's new minAvailable after the task moves to `to_replicas` (the object's
        replicas then total `new_total`; `wanted` is the decision's), None to leave it, or why the
        change breaks the kind's rules. Only called for a kind with `tasks`."""
        return None

    @abc.abstractmethod
    def replicas_pointer(self, ref: TargetRef, scale_path: str | None = None) -> str | None:
        """The JSON pointer of the replicas a decision sets; None when this kind finds it in the
        object only (a Volcano Job's task) or, for a CRD, when it has no scale subresource."""


def escape_pointer(token: str) -> str:
    """One JSON pointer reference token (RFC 6901): `~` -> `~0`, `/` -> `~1`."""
    return token.replace("~", "~0").replace("/", "~1")


def to_pointer(path: str) -> str:
    """A CRD's `specReplicasPath` (`.spec.a.b`) or a JSON pointer (`/spec/a/b`) -> JSON pointer."""
    if path.startswith("/"):
        return path
    if not path.startswith("."):
        raise ValueError(f"not a .dotted path or JSON pointer: {path!r}")
    parts = path[1:].split(".")
    if not all(parts):
        raise ValueError(f"empty segment in {path!r}")
    return "/" + "/".join(escape_pointer(p) for p in parts)


def pointer_segments(pointer: str) -> list[str]:
    """The reference tokens of a JSON pointer, unescaped: `/spec/a~1b` → ["spec", "a/b"]."""
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def path_segments(path: str) -> list[str]:
    """`.spec.a.b`, `spec.a.b` or the JSON pointer `/spec/a/b` → ["spec", "a", "b"]."""
    if path.startswith("/"):
        return pointer_segments(path)
    return [s for s in path.split(".") if s]


def dig(obj: Any, segments: Sequence[str]) -> Any:
    """The value at `segments` in decoded JSON, or None when a step is missing."""
    for s in segments:
        if isinstance(obj, Mapping):
            obj = obj.get(s)
        elif isinstance(obj, list) and s.isdigit() and int(s) < len(obj):
            obj = obj[int(s)]
        else:
            return None
    return obj


def timestamp(text: str | None) -> float | None:
    """An RFC 3339 time as Unix seconds; None when absent or not a time."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


T = TypeVar("T")


def convert(obj: Mapping[str, Any], typ: type[T], what: str) -> T:
    """Decoded JSON as `typ`; `InventoryError` naming `what` when it is not one."""
    try:
        return msgspec.convert(obj, typ, str_keys=True)
    except msgspec.ValidationError as e:
        raise InventoryError(f"{what}: {e}") from None
