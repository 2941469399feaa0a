"""The cluster collector's core, without I/O: what the watches saw, and what was last published.

The reflectors feed `on(Watched)` with every object change; `compute(now)` turns the current
objects into the messages worth sending (one per key whose content differs from the last
published value, tombstones for keys that are gone); the shell sends them and calls
`acknowledge` for each one the broker acknowledged. `cores.cluster_flush.ClusterFlush` is the
`run_core` core around this model: when to compute (start-up, the Lease, coalescing, backoff).
What could not be read is reported, not logged: `take_reports` hands the shell each new input
problem and invalid policy (it counts and logs them). `published` starts from the compacted
topics themselves, so a restart publishes only what changed while the collector was down (and
tombstones what went away).

What each output depends on (so that `compute` only recomputes what an event can have changed):

* a node's `NodeState`: the Node, its Device, the pods bound to it, and which pods are managed
  (the selectors of all policy targets; a change of that set recomputes every node);
* policies and workloads: from the ScalingPolicy objects, their targets, PriorityClasses and
  (for readiness without a status) the targets' pods. A policy or PriorityClass change (or a
  target kind appearing) recomputes them all; a pod or target change only those of its namespace
  (pods and target status writes are the frequent events).

Keys whose inputs are unknown (an invalid ScalingPolicy, a target kind whose watch has not listed
yet, a target that cannot be read) are left alone: neither updated nor tombstoned. An invalid
update of a policy keeps its last valid version in force (its workload and the pods it manages
are still tracked with it); a target that cannot be read keeps its last known selector.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import msgspec

from governor import targets
from governor.cores import Outputs
from governor.events import Event
from governor.inventory import (
    POOL_LABEL,
    DeviceObject,
    InventoryError,
    LabelSelector,
    Node,
    Pod,
    PriorityClass,
    managed_matcher,
    node_state,
    policy_from_cluster,
    policy_record,
    selector_string,
    workload_state,
    worth_publishing,
)
from governor.quotas import (
    Covered,
    PodGroup,
    Queue,
    ResourceQuota,
    job_queue,
    queue_state,
    quota_state,
)
from governor.spec import PolicyError, ScalingPolicy
from governor.targets import TargetView, target_view

Table = Literal["policies", "workloads", "cluster", "quotas", "queues"]
TABLES: tuple[Table, ...] = ("policies", "workloads", "cluster", "quotas", "queues")
GVK = tuple[str, str]  # (apiVersion, kind) of a target
_Obj = TypeVar("_Obj")  # an object kept per node: its Node or its Device
TargetStatus = Literal["pending", "synced", "missing"]


@dataclass(frozen=True)
class Report:
    """Something the shell counts and logs: an input that could not be read (`problem`, each
    text once), or a ScalingPolicy rejected by validation (`invalid_policy`, once per
    resourceVersion; `key` names it), or a flush whose compute raised (`failure`: the
    traceback; `cores.cluster_flush` retries it)."""

    kind: Literal["problem", "invalid_policy", "failure"]
    text: str
    key: str = ""


@dataclass(frozen=True)
class Change:
    """One message to send: `value` None is a tombstone."""

    table: Table
    key: str
    value: Event | None


Resource = Literal[
    "node", "device", "pod", "policy", "priority_class", "target", "quota", "queue", "podgroup"
]


@dataclass(frozen=True)
class Watched:
    """One object change a watch saw: `old` None is an add, `new` None a delete. A policy
    target's change names the target's kind (`gvk`)."""

    resource: Resource
    key: str
    old: Any
    new: Any
    gvk: GVK | None = None


class ClusterCore:
    def __init__(self, *, pool_label: str = POOL_LABEL, max_problems_remembered: int = 10_000):
        self.pool_label = pool_label
        self.nodes: dict[str, Node] = {}
        self.pods: dict[str, Pod] = {}
        self.devices: dict[str, DeviceObject] = {}
        self.devices_served = False
        self.policies: dict[str, dict[str, Any]] = {}
        self.classes: dict[str, PriorityClass] = {}
        self.targets: dict[GVK, dict[str, dict[str, Any]]] = {}
        self.target_status: dict[GVK, TargetStatus] = {}
        self.pods_by_node: dict[str, set[str]] = {}
        self.pods_by_ns: dict[str, set[str]] = {}
        self.published: dict[Table, dict[str, Event]] = {t: {} for t in TABLES}
        self.dirty_nodes: set[str] = set()
        self.all_dirty = True
        self.dirty = True
        self._selectors: frozenset[tuple[str, str]] | None = None
        self._policy_cache: dict[str, tuple[str, ScalingPolicy | PolicyError]] = {}
        self._seen_problems: set[str] = set()
        # the last valid version of each policy, and each workload's last known pod selector
        self._last_good: dict[str, ScalingPolicy] = {}
        self._last_selector: dict[str, tuple[str, LabelSelector]] = {}
        self._label_index: dict[tuple[str, str, str], list[Pod]] | None = None
        # policies/workloads: recompute all (policy, PriorityClass, target kind changes) or only
        # those of the namespaces whose pods (readiness) or targets changed
        self.policies_dirty = True
        self.dirty_namespaces: set[str] = set()
        self._policy_selector: dict[str, tuple[str, LabelSelector]] = {}
        self._max_problems = max_problems_remembered
        # ResourceQuotas (namespace/name), Volcano Queues (name), PodGroups (namespace/name) and
        # what each scaled workload looks like to them (`governor.quotas`)
        self.quotas: dict[str, ResourceQuota] = {}
        self.queues: dict[str, Queue] = {}
        self.podgroups: dict[str, PodGroup] = {}
        self.covered: dict[str, Covered] = {}
        self.reports: list[Report] = []  # since the last `take_reports`

    # --- inputs -------------------------------------------------------------------------------

    def load_published(self, table: Table, values: Mapping[str, Event]) -> None:
        """What the topic holds already (read at start-up)."""
        self.published[table] = dict(values)
        self.mark_all_dirty()

    def mark_all_dirty(self) -> None:
        self.all_dirty = True
        self.policies_dirty = True
        self.dirty = True

    def on(self, record: Watched) -> Outputs[Change]:
        """Take one object change; what it changes is published by the next `tick`."""
        r = record
        match r.resource:
            case "target":
                assert r.gvk is not None
                self._on_target(r.gvk, r.key, r.new)
            case "node":
                self._node_changed(self.nodes, r.key, r.new)
            case "device":
                self._node_changed(self.devices, r.key, r.new)  # a Device is named after its node
            case "pod":
                self._on_pod(r.key, r.old, r.new)
            case "policy":
                self._on_policy(r.key, r.new)
            case "priority_class":
                self._on_priority_class(r.key, r.new)
            case "quota":
                self._keep(self.quotas, r.key, r.new)
            case "queue":
                self._keep(self.queues, r.key, r.new)
            case "podgroup":
                self._keep(self.podgroups, r.key, r.new)
        return Outputs()

    def _node_changed(self, store: dict[str, _Obj], key: str, new: _Obj | None) -> None:
        """A node's object (the Node or its Device) put or deleted: that node is to publish."""
        if new is None:
            store.pop(key, None)
        else:
            store[key] = new
        self.dirty_nodes.add(key)
        self.dirty = True

    def _on_pod(self, key: str, old: Pod | None, new: Pod | None) -> None:
        for p in (old, new):
            if p is not None:
                self.dirty_namespaces.add(p.metadata.namespace)
        if old is not None:
            self._unindex(key, old)
            if old.spec.node_name:
                self.dirty_nodes.add(old.spec.node_name)
        if new is None:
            self.pods.pop(key, None)
        else:
            self.pods[key] = new
            self.pods_by_ns.setdefault(new.metadata.namespace, set()).add(key)
            if new.spec.node_name:
                self.pods_by_node.setdefault(new.spec.node_name, set()).add(key)
                self.dirty_nodes.add(new.spec.node_name)
        self.dirty = True

    def _unindex(self, key: str, pod: Pod) -> None:
        ns = self.pods_by_ns.get(pod.metadata.namespace)
        if ns is not None:
            ns.discard(key)
            if not ns:
                del self.pods_by_ns[pod.metadata.namespace]
        if pod.spec.node_name:
            on = self.pods_by_node.get(pod.spec.node_name)
            if on is not None:
                on.discard(key)
                if not on:
                    del self.pods_by_node[pod.spec.node_name]

    def _on_policy(self, key: str, new: dict[str, Any] | None) -> None:
        if new is None:
            self.policies.pop(key, None)
            self._policy_cache.pop(key, None)
            self._last_good.pop(key, None)
        else:
            self.policies[key] = new
        self.policies_dirty = True
        self.dirty = True

    def _on_priority_class(self, key: str, new: PriorityClass | None) -> None:
        if new is None:
            self.classes.pop(key, None)
        else:
            self.classes[key] = new
        self.policies_dirty = True
        self.dirty = True

    def _on_target(self, gvk: GVK, key: str, new: dict[str, Any] | None) -> None:
        objs = self.targets.setdefault(gvk, {})
        if new is None:
            objs.pop(key, None)
        else:
            objs[key] = new
        # only the policies of its namespace can be affected (status writes are frequent)
        self.dirty_namespaces.add(key.partition("/")[0])
        self.dirty = True

    def set_target_status(self, gvk: GVK, status: TargetStatus) -> None:
        if self.target_status.get(gvk) != status:
            self.target_status[gvk] = status
            self.policies_dirty = True
            self.dirty = True

    def _keep(self, into: dict[str, Any], key: str, new: Any) -> None:
        if new is None:
            into.pop(key, None)
        else:
            into[key] = new
        self.dirty = True

    # --- policies -----------------------------------------------------------------------------

    def _problem(self, text: str) -> None:
        if text in self._seen_problems:
            return
        if len(self._seen_problems) >= self._max_problems:
            self._seen_problems.clear()
        self._seen_problems.add(text)
        self.reports.append(Report("problem", text))

    def take_reports(self) -> list[Report]:
        reports, self.reports = self.reports, []
        return reports

    def policy(self, key: str) -> ScalingPolicy | None:
        """The validated policy of a ScalingPolicy object (None if invalid; reported once per
        resourceVersion)."""
        obj = self.policies.get(key)
        if obj is None:
            return None
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        cached = self._policy_cache.get(key)
        if cached is None or cached[0] != rv or not rv:
            try:
                result: ScalingPolicy | PolicyError = policy_from_cluster(obj)
            except PolicyError as e:
                result = e
                self.reports.append(Report("invalid_policy", str(e), key))
            cached = (rv, result)
            self._policy_cache[key] = cached
        return cached[1] if isinstance(cached[1], ScalingPolicy) else None

    def wanted_targets(self) -> set[GVK]:
        """(apiVersion, kind) of every valid policy's target: the kinds to watch."""
        out: set[GVK] = set()
        for key in self.policies:
            p = self.policy(key)
            if p is not None:
                out.add((p.spec.target_ref.api_version, p.spec.target_ref.kind))
        return out

    def _view(self, p: ScalingPolicy) -> TargetView | Literal["unknown"] | None:
        """The target's view; None if it does not exist; "unknown" if we cannot tell yet."""
        ref = p.spec.target_ref
        gvk = (ref.api_version, ref.kind)
        status = self.target_status.get(gvk, "pending")
        if status == "pending":
            return "unknown"
        if status == "missing":
            return None
        obj = self.targets.get(gvk, {}).get(f"{p.metadata.namespace}/{ref.name}")
        if obj is None:
            return None
        try:
            return target_view(p, obj)
        except InventoryError as e:
            self._problem(str(e))
            return "unknown"

    def _candidates(self, namespace: str, selector: LabelSelector | None) -> list[Pod]:
        """Pods that may match `selector` in `namespace` (a superset; the caller matches).

        Uses a per-compute index of (namespace, label, value) when the selector has a label to
        look up, so that readiness counting is not (workloads × pods) per flush.
        """
        if selector is not None and selector.match_labels:
            if self._label_index is None:
                index: dict[tuple[str, str, str], list[Pod]] = {}
                for pod in self.pods.values():
                    ns = pod.metadata.namespace
                    for k, v in pod.metadata.labels.items():
                        index.setdefault((ns, k, v), []).append(pod)
                self._label_index = index
            k, v = next(iter(sorted(selector.match_labels.items())))
            return self._label_index.get((namespace, k, v), [])
        return [self.pods[k] for k in self.pods_by_ns.get(namespace, ())]

    # --- compute ------------------------------------------------------------------------------

    def compute(self, now: float) -> list[Change]:
        """Every message worth sending now (see the module docstring)."""
        self.dirty = False
        self._label_index = None
        full = self.policies_dirty
        namespaces = self.dirty_namespaces
        self.policies_dirty = False
        self.dirty_namespaces = set()
        if full:
            self._policy_selector.clear()
            self.covered.clear()
        changes = self._policies_and_workloads(full, namespaces, now)
        changes += self._nodes(now)
        self.dirty_nodes.clear()
        self.all_dirty = False
        return changes

    def _policies_and_workloads(self, full: bool, namespaces: set[str], now: float) -> list[Change]:
        """The policies' records and their targets' WorkloadStates: every policy when `full`,
        else those of the namespaces whose pods changed."""
        changes: list[Change] = []
        policy_out: dict[str, Event] = {}
        workload_out: dict[str, Event] = {}
        keep_policies: set[str] = set()  # unknown: neither update nor tombstone
        keep_workloads: set[str] = set()
        considered_workloads: set[str] = set()
        considered_policies: set[str] = set()
        for key in sorted(self.policies):
            if not full and key.partition("/")[0] not in namespaces:
                continue  # only pods changed, none in this namespace: nothing to redo
            considered_policies.add(key)
            p = self.policy(key)
            if p is None:  # invalid now: keep what was published, go on with the last good one
                keep_policies.add(key)
                p = self._last_good.get(key)
                if p is None:
                    continue
                explicit_valid = False
            else:
                self._last_good[key] = p
                explicit_valid = True
            view = self._view(p)
            if view == "unknown":
                keep_policies.add(key)
                keep_workloads.add(p.workload)
                known = self._last_selector.get(p.workload)
                if known is not None:
                    self._policy_selector[key] = known
                continue
            considered_workloads.add(p.workload)
            if explicit_valid:
                try:
                    policy_out[key] = policy_record(self.policies[key], view, self.classes, now)
                except PolicyError:  # validated above; the cache says valid
                    keep_policies.add(key)
            if view is None:
                self._last_selector.pop(p.workload, None)
                self._policy_selector.pop(key, None)
                self.covered.pop(p.workload, None)
                continue
            self.covered[p.workload] = self._covered(p, view)
            if view.selector is not None:
                self._last_selector[p.workload] = (p.metadata.namespace, view.selector)
                self._policy_selector[key] = (p.metadata.namespace, view.selector)
            if p.workload in workload_out:
                if p.spec.mode != "Shadow":  # a Shadow shares its target's state by design
                    self._problem(
                        f"{p.workload} is the target of several policies; using the first"
                    )
                continue
            pods = (
                self._candidates(p.metadata.namespace, view.selector)
                if view.status_ready is None
                else []
            )
            state, problems = workload_state(p, view, pods, now)
            for text in problems:
                self._problem(text)
            workload_out[p.workload] = state
        if full:
            changes += self._diff("policies", policy_out, keep_policies, full=True)
            changes += self._diff("workloads", workload_out, keep_workloads, full=True)
        else:
            changes += self._diff(
                "policies", policy_out, keep_policies, full=False, considered=considered_policies
            )
            changes += self._diff(
                "workloads",
                workload_out,
                keep_workloads,
                full=False,
                considered=considered_workloads,
            )
        return changes

    def _nodes(self, now: float) -> list[Change]:
        """The nodes' states (all when the managed selectors changed, else the dirty ones) and
        the quotas' and queues' limits."""
        changes: list[Change] = []
        selectors = {(ns, selector_string(sel)): sel for ns, sel in self._policy_selector.values()}

        sel_key = frozenset(selectors)
        if sel_key != self._selectors:
            self._selectors = sel_key
            self.all_dirty = True
        managed = managed_matcher((ns, sel) for (ns, _), sel in selectors.items())
        names: Iterable[str]
        if self.all_dirty:
            names = set(self.nodes) | set(self.published["cluster"])
        else:
            names = self.dirty_nodes
        node_out: dict[str, Event] = {}
        for name in sorted(names):
            node = self.nodes.get(name)
            if node is None:
                continue
            pods = [self.pods[k] for k in self.pods_by_node.get(name, ())]
            nstate, problems = node_state(
                node,
                pods,
                self.devices.get(name) if self.devices_served else None,
                managed,
                now,
                pool_label=self.pool_label,
            )
            for text in problems:
                self._problem(text)
            node_out[name] = nstate
        changes += self._diff("cluster", node_out, set(), full=False, considered=set(names))
        changes += self._limits(managed, now)
        return changes

    def _covered(self, p: ScalingPolicy, view: TargetView) -> Covered:
        ref = p.spec.target_ref
        queue = None
        if targets.kind_of(ref).queued:
            obj = self.targets.get((ref.api_version, ref.kind), {}).get(
                f"{p.metadata.namespace}/{ref.name}"
            )
            try:
                queue = job_queue(obj or {})
            except msgspec.ValidationError as e:
                self._problem(f"{p.workload}: spec.queue: {e}")
        # Pods without a class get the globalDefault one at admission (so PriorityClass scopes
        # see it).
        default = next(
            (c.metadata.name for _, c in sorted(self.classes.items()) if c.global_default), ""
        )
        return Covered(
            p.workload,
            p.metadata.namespace,
            view.template,
            view.priority_class or default,
            queue,
        )

    def _limits(self, managed: Any, now: float) -> list[Change]:
        """Every quota and queue, recomputed each flush: there are few, and a pod anywhere may
        change what they hold (published only when the content changed)."""
        covered = list(self.covered.values())
        # One that cannot be read (a bad quantity) keeps its last published value.
        keep_quotas: set[str] = set()
        quota_out: dict[str, Event] = {}
        for key, q in sorted(self.quotas.items()):
            pods = [self.pods[k] for k in self.pods_by_ns.get(q.metadata.namespace, ())]
            try:
                quota_out[key] = quota_state(q, covered, pods, managed, now)
            except InventoryError as e:
                self._problem(f"ResourceQuota {key}: {e}")
                keep_quotas.add(key)
        keep_queues: set[str] = set()
        queue_out: dict[str, Event] = {}
        if self.queues:
            pods = list(self.pods.values())
            for key, queue in sorted(self.queues.items()):
                try:
                    queue_out[key] = queue_state(queue, covered, pods, self.podgroups, managed, now)
                except InventoryError as e:
                    self._problem(f"Queue {key}: {e}")
                    keep_queues.add(key)
        return self._diff("quotas", quota_out, keep_quotas, full=True) + self._diff(
            "queues", queue_out, keep_queues, full=True
        )

    def _diff(
        self,
        table: Table,
        wanted: Mapping[str, Event],
        keep: set[str],
        *,
        full: bool,
        considered: set[str] | None = None,
    ) -> list[Change]:
        last = self.published[table]
        out = [Change(table, k, v) for k, v in wanted.items() if worth_publishing(last.get(k), v)]
        scope = last.keys() if full else (considered or set())
        gone = [k for k in sorted(scope) if k in last and k not in wanted and k not in keep]
        out += [Change(table, k, None) for k in gone]
        return out

    def acknowledge(self, change: Change) -> None:
        """The broker has the message: it is now the last published value of its key."""
        if change.value is None:
            self.published[change.table].pop(change.key, None)
        else:
            self.published[change.table][change.key] = change.value
