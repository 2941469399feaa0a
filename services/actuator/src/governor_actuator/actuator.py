"""The Kubernetes side of the actuator: one ScaleDecision in, one Actuation out.

Everything that decides is in `governor.policy.actuation`; this module reads what those functions
need from the API server (the ScalingPolicy, HPAs and ScaledObjects, the target) and writes what
they return (the fenced patch, the ScalingPolicy status, an Event). Every API call goes through
`_call`: a client-side QPS budget (token bucket) and retries with backoff on 429, 5xx and no
answer (honouring Retry-After).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from prometheus_client import Counter, Histogram

from governor.events import Actuation, ActuationOutcome, ScaleDecision
from governor.kube import Kube, KubeError
from governor.policy import actuation as core
from governor.policy import pacing
from governor.policy.status import policy_status
from governor.spec import PolicyError, ScalingPolicy, policy_from_obj
from governor_actuator.config import ActuatorSettings

log = logging.getLogger("governor.actuator")

T = TypeVar("T")

POLICY_API = "governor.dev/v1alpha1"
POLICY_PLURAL = "scalingpolicies"

ACTUATIONS = Counter(
    "governor_actuator_actuations",
    "Decisions handled, by outcome (applied, noop, refused, failed, dry_run) and reason "
    "(the refusal code, the failure, or the decision's binding rule).",
    ["outcome", "reason"],
)
DECISION_TO_PATCH = Histogram(
    "governor_actuator_decision_to_patch_seconds",
    "From the decision's decided_at to the API server's answer to its patch.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
STATUS_ERRORS = Counter(
    "governor_actuator_status_write_errors",
    "ScalingPolicy status writes that failed after retries.",
)
EVENTS_DROPPED = Counter(
    "governor_actuator_events_dropped",
    "Kubernetes Events not created because the event queue was full.",
)
KUBE_ERRORS = Counter(
    "governor_actuator_kube_errors",
    "API server errors by HTTP status (0: no answer), including the ones retried.",
    ["code"],
)

# Kinds whose replicas live at /spec/replicas (no CRD to read).
BUILTIN_SCALABLE = {("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet")}


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


V = TypeVar("V")


class TtlCache(Generic[V]):
    """Values by key, never older than `ttl` seconds; concurrent misses of one key share one load.

    Refresh-ahead: a value past half its TTL is still returned, and reloaded in the background,
    so steady traffic never waits for a reload; only a value past its full TTL is waited for.
    """

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._values: dict[str, tuple[float, V]] = {}
        self._loading: dict[str, asyncio.Task[V]] = {}

    async def get(self, key: str, load: Callable[[], Awaitable[V]]) -> V:
        hit = self._values.get(key)
        age = time.monotonic() - hit[0] if hit is not None else None
        if hit is not None and age is not None and age < self.ttl:
            if age > self.ttl / 2 and key not in self._loading:
                ahead = asyncio.ensure_future(self._load(key, load, ahead=True))
                ahead.add_done_callback(lambda t: t.cancelled() or t.exception())
                self._loading[key] = ahead
            return hit[1]
        task = self._loading.get(key)
        if task is None:
            task = asyncio.ensure_future(self._load(key, load))
            self._loading[key] = task
        return await asyncio.shield(task)

    async def _load(self, key: str, load: Callable[[], Awaitable[V]], ahead: bool = False) -> V:
        started = time.monotonic()
        try:
            value = await load()
            self._values[key] = (started, value)  # as old as the moment it was asked for
            return value
        except Exception as e:
            if ahead:  # drop the old value: the next use must load (and see the error)
                self._values.pop(key, None)
                log.warning("refresh of %s failed (%s); the next use reloads it", key, e)
            raise
        finally:
            del self._loading[key]

    def put(self, key: str, value: V) -> None:
        self._values[key] = (time.monotonic(), value)


class PolicyIndex:
    """A namespace's ScalingPolicies as last listed: by name (a ScalingPolicy, or the PolicyError
    that says why the object on the API server is not one) and by target workload."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.by_name: dict[str, ScalingPolicy | PolicyError] = {}
        self.by_workload: dict[str, str] = {}
        self.status: dict[str, dict[str, Any]] = {}
        for obj in items:
            self.add(obj)

    def add(self, obj: dict[str, Any]) -> ScalingPolicy | PolicyError:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        ref = (obj.get("spec") or {}).get("targetRef") or {}
        if (obj.get("spec") or {}).get("mode", "Active") == "Active":  # a Shadow never scales
            self.by_workload.setdefault(
                f"{meta.get('namespace')}/{ref.get('kind')}/{ref.get('name')}", name
            )
        try:
            value: ScalingPolicy | PolicyError = policy_from_obj(obj)
        except PolicyError as err:
            value = err
        self.by_name[name] = value
        self.status[name] = dict(obj.get("status") or {})
        return value


class Actuator:
    """Applies decisions to the API server. `handle` never raises for a bad decision or an API
    failure: the outcome is in the returned Actuation."""

    def __init__(self, kube: Kube, settings: ActuatorSettings) -> None:
        self.kube = kube
        self.settings = settings
        self.rules = settings.rules()
        # Two QPS budgets: decisions (reads, the fenced patch) and side writes (status, Events),
        # so a flood of side writes never delays a patch. The API server sees at most their sum.
        self._bucket = pacing.TokenBucket(settings.qps, settings.burst, time.monotonic())
        self._side_bucket = pacing.TokenBucket(
            settings.side_qps, settings.side_burst, time.monotonic()
        )
        self._bucket_lock = asyncio.Lock()
        # ScalingPolicies per namespace, one LIST per policy_ttl_seconds (a name not in the
        # list is fetched at once, so a new policy is seen without waiting for the TTL).
        self._policies: TtlCache[PolicyIndex] = TtlCache(settings.policy_ttl_seconds)
        self._status: dict[str, dict[str, Any]] = {}  # ns/name -> the status last computed
        # HPAs and ScaledObjects per namespace, one LIST each per owner_ttl_seconds.
        self._owners: TtlCache[tuple[list[Any], list[Any]]] = TtlCache(settings.owner_ttl_seconds)
        self._pointers: dict[tuple[str, str], str] = {}
        self._instance = socket.gethostname()
        # Status and Events are written off the decision's path, by background writers: the
        # newest status per ScalingPolicy (coalesced), Events in order through a bounded queue.
        self._status_pending: dict[str, tuple[ScalingPolicy, dict[str, Any], str]] = {}
        self._status_wake = asyncio.Event()
        self._events: asyncio.Queue[tuple[str, dict[str, Any], str, str]] = asyncio.Queue(
            maxsize=settings.event_queue_size
        )
        self._writers: list[asyncio.Task[None]] = []
        self._writing = 0
        # Decisions in flight: the background writers yield to them (up to writer_yield_s) so a
        # burst of decisions reaches the API server before its status and Events.
        self._foreground = 0
        self._idle = asyncio.Event()
        self._idle.set()

    # --- API calls with a budget and retries --------------------------------------------------

    async def _call(self, what: str, fn: Callable[[], Awaitable[T]], *, side: bool = False) -> T:
        bucket = self._side_bucket if side else self._bucket
        attempt = 0
        while True:
            attempt += 1
            async with self._bucket_lock:
                wait = bucket.reserve(time.monotonic())
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                return await fn()
            except KubeError as e:
                KUBE_ERRORS.labels(str(e.status)).inc()
                if not e.retryable or attempt > self.settings.max_retries:
                    raise
                delay = pacing.backoff_seconds(attempt, e.retry_after)
                log.warning(
                    "%s: %s %s; retry %d in %.2fs", what, e.status, e.reason, attempt, delay
                )
                await asyncio.sleep(delay)

    # --- reads (cached) ---------------------------------------------------------------------

    async def _policy(self, decision: ScaleDecision) -> ScalingPolicy | PolicyError | None:
        wid = core.parse_workload(decision.workload)
        assert wid is not None  # precheck passed
        ns = wid.namespace
        index = await self._policies.get(ns, lambda: self._list_policies(ns))
        name = decision.policy.partition("/")[2] if decision.policy else None
        name = name or index.by_workload.get(decision.workload)
        found = index.by_name.get(name) if name else None
        if found is None and name:
            # not in the last list: maybe created since
            try:
                obj = await self._call(
                    f"get ScalingPolicy {ns}/{name}",
                    lambda: self.kube.get(POLICY_API, POLICY_PLURAL, name, namespace=ns),
                )
            except KubeError as e:
                if not e.not_found:
                    raise
                return None
            found = index.add(obj)
        if found is None:
            return None
        # the actuator is the only writer of status: its own last status wins over a stale read
        self._status.setdefault(f"{ns}/{name}", index.status.get(str(name), {}))
        return found

    async def _list_policies(self, namespace: str) -> PolicyIndex:
        items = await self._call(
            f"list ScalingPolicies in {namespace}",
            lambda: self.kube.list_objects(POLICY_API, POLICY_PLURAL, namespace=namespace),
        )
        return PolicyIndex(items)

    async def _owners_of(self, namespace: str) -> tuple[list[Any], list[Any]]:
        return await self._owners.get(namespace, lambda: self._list_owners(namespace))

    async def _list_owners(self, namespace: str) -> tuple[list[Any], list[Any]]:
        hpas, sos = await asyncio.gather(
            self._call(
                f"list HPAs in {namespace}",
                lambda: self.kube.list_objects(
                    "autoscaling/v2", "horizontalpodautoscalers", namespace=namespace
                ),
            ),
            self._list_scaled_objects(namespace),
        )
        return hpas, sos

    async def _list_scaled_objects(self, namespace: str) -> list[Any]:
        try:
            return await self._call(
                f"list ScaledObjects in {namespace}",
                lambda: self.kube.list_objects(
                    "keda.sh/v1alpha1", "scaledobjects", namespace=namespace
                ),
            )
        except KubeError as e:
            if not e.not_found:  # 404: KEDA is not installed
                raise
            return []

    async def _replicas_pointer(self, policy: ScalingPolicy, plural: str) -> str | None:
        ref = policy.spec.target_ref
        if ref.spec_replicas_path:
            return core.to_pointer(ref.spec_replicas_path)
        group = core.api_group(ref.api_version)
        if (group, ref.kind) in BUILTIN_SCALABLE:
            return "/spec/replicas"
        key = (group, plural)
        if key not in self._pointers:
            scale = await self._call(
                f"get CRD {plural}.{group}", lambda: self.kube.crd_scale(group, plural)
            )
            if scale is None:
                return None
            self._pointers[key] = core.to_pointer(scale.spec_replicas_path)
        return self._pointers[key]

    # --- the decision ------------------------------------------------------------------------

    async def handle(self, decision: ScaleDecision) -> Actuation:
        self._foreground += 1
        self._idle.clear()
        try:
            return await self._handle_safely(decision)
        finally:
            self._foreground -= 1
            if self._foreground == 0:
                self._idle.set()

    async def _yield_to_decisions(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), self.settings.writer_yield_s)

    async def _handle_safely(self, decision: ScaleDecision) -> Actuation:
        try:
            return await self._handle(decision)
        except KubeError as e:
            return await self._finish(
                decision,
                None,
                None,
                "failed",
                f"kube_error: {e}",
                None,
                None,
                code=f"kube_{e.status}",
            )
        except Exception as e:  # a bug must not wedge the partition; it is recorded
            log.exception("actuator bug on %s", decision.decision_id)
            return await self._finish(
                decision,
                None,
                None,
                "failed",
                f"internal: {type(e).__name__}: {e}",
                None,
                None,
                code="internal",
            )

    async def _handle(self, decision: ScaleDecision) -> Actuation:
        early = core.precheck(decision, self.rules)
        if early is not None:
            return await self._refused(decision, None, None, early, notify=False)
        policy = await self._policy(decision)
        if isinstance(policy, PolicyError):
            refusal = core.Refusal("invalid_policy", f"ScalingPolicy {decision.policy}: {policy}")
            return await self._refused(decision, None, None, refusal, notify=False)
        admitted = core.admit(decision, policy, self.rules)
        if admitted is not None:
            return await self._refused(decision, policy, None, admitted)
        assert policy is not None
        ref = policy.spec.target_ref
        hpas, sos = await self._owners_of(policy.metadata.namespace)
        owned = core.other_owners(ref, hpas, sos)
        if owned is not None:
            return await self._refused(decision, policy, None, owned)
        res = await self._call(
            f"discover {ref.kind}", lambda: self.kube.resource(ref.api_version, ref.kind)
        )
        pointer = None
        if not core.is_volcano_job(ref):
            pointer = await self._replicas_pointer(policy, res.plural)
            if pointer is None:
                no_scale = core.Refusal(
                    "invalid_policy",
                    f"{core.kind_key(ref.kind, ref.api_version)} has no scale subresource; "
                    "set targetRef.specReplicasPath",
                )
                return await self._refused(decision, policy, None, no_scale)
        ns = policy.metadata.namespace
        digest = core.decision_digest(decision)
        for attempt in range(1, self.settings.fence_attempts + 1):
            try:
                obj = await self._call(
                    f"get {decision.workload}",
                    lambda: self.kube.get(ref.api_version, res.plural, ref.name, namespace=ns),
                )
            except KubeError as e:
                if e.not_found:
                    missing = core.Refusal("target_not_found", f"{decision.workload} not found")
                    return await self._refused(decision, policy, None, missing)
                raise
            state = core.read_target(obj, ref, pointer)
            if isinstance(state, core.Refusal):
                return await self._refused(decision, policy, None, state, obj=obj)
            planned = core.plan(decision, policy, state, digest=digest)
            if isinstance(planned, core.Refusal):
                return await self._refused(decision, policy, state, planned, obj=obj)
            ops = planned.patch
            try:
                result = await self._call(
                    f"patch {decision.workload}",
                    lambda: self.kube.json_patch(
                        ref.api_version,
                        res.plural,
                        ref.name,
                        ops,  # noqa: B023 - awaited before the loop moves on
                        namespace=ns,
                        dry_run=self.settings.dry_run,
                        field_manager=self.settings.field_manager,
                    ),
                )
            except KubeError as e:
                if _fence_lost(e) and attempt < self.settings.fence_attempts:
                    log.info(
                        "fence moved under %s (attempt %d): re-reading",
                        decision.workload,
                        attempt,
                        extra={"workload": decision.workload, "decision_id": decision.decision_id},
                    )
                    continue
                if _fence_lost(e):
                    raise
                if e.status in (400, 403, 422):  # the API server or RBAC said no: not retryable
                    return await self._finish(
                        decision,
                        policy,
                        state,
                        "failed",
                        f"rejected: {e}",
                        obj,
                        None,
                        code=f"kube_{e.status}",
                    )
                raise
            DECISION_TO_PATCH.observe(max(0.0, time.time() - decision.decided_at))
            if self.settings.dry_run:
                outcome: ActuationOutcome = "dry_run"
            else:
                outcome = "applied" if planned.changes_replicas else "noop"
            text = core.reason_text(decision.reasons)
            if outcome == "noop":
                text = f"replicas already {decision.to_replicas}; {text}"
            return await self._finish(
                decision, policy, state, outcome, text, obj, result, plan=planned
            )
        raise KubeError(409, "Conflict", f"fence kept moving under {decision.workload}") from None

    # --- outputs -----------------------------------------------------------------------------

    async def _refused(
        self,
        decision: ScaleDecision,
        policy: ScalingPolicy | None,
        state: core.TargetState | None,
        refusal: core.Refusal,
        *,
        notify: bool = True,
        obj: dict[str, Any] | None = None,
    ) -> Actuation:
        quiet = refusal.code in core.QUIET_REFUSALS or not notify
        return await self._finish(
            decision,
            policy,
            state,
            "refused",
            refusal.reason,
            obj,
            None,
            code=refusal.code,
            quiet=quiet,
        )

    async def _finish(
        self,
        decision: ScaleDecision,
        policy: ScalingPolicy | None,
        state: core.TargetState | None,
        outcome: ActuationOutcome,
        reason: str,
        obj: dict[str, Any] | None,
        result: dict[str, Any] | None,
        *,
        code: str | None = None,
        quiet: bool = False,
        plan: core.Plan | None = None,
    ) -> Actuation:
        if code is None:
            code = decision.reasons[0].rule if decision.reasons else "unspecified"
        ACTUATIONS.labels(outcome, code).inc()
        rv = None
        if result is not None:
            rv = (result.get("metadata") or {}).get("resourceVersion")
        elif obj is not None:
            rv = (obj.get("metadata") or {}).get("resourceVersion")
        from_replicas = state.replicas if state is not None else decision.from_replicas
        actuation = Actuation(
            decision_id=decision.decision_id,
            workload=decision.workload,
            seq=decision.seq,
            outcome=outcome,
            reason=reason,
            from_replicas=from_replicas,
            to_replicas=decision.to_replicas,
            at=time.time(),
            resource_version=rv,
        )
        level = logging.INFO if outcome in ("applied", "noop", "dry_run") else logging.WARNING
        if quiet:
            level = logging.INFO
        log.log(
            level,
            "%s %s seq %d: %s",
            outcome,
            decision.workload,
            decision.seq,
            reason,
            extra={
                "workload": decision.workload,
                "decision_id": decision.decision_id,
                "seq": decision.seq,
                "outcome": outcome,
                "code": code,
                "from": from_replicas,
                "to": decision.to_replicas,
            },
        )
        if outcome == "dry_run" or quiet:
            return actuation
        if policy is not None and self.settings.write_status:
            observed = state.replicas if state is not None else None
            self._queue_status(policy, decision, outcome, reason, observed)
        if self.settings.events and policy is not None:
            self._queue_event(policy, decision, outcome, reason, obj, result, from_replicas)
        return actuation

    # --- background writers -------------------------------------------------------------------

    def _ensure_writers(self) -> None:
        if not self._writers:
            self._writers = [
                asyncio.create_task(self._status_loop()),
                asyncio.create_task(self._event_loop()),
            ]

    def _busy(self) -> bool:
        return bool(self._status_pending or not self._events.empty() or self._writing)

    async def drain(self, within_s: float = 10.0) -> None:
        """Write what is queued (status, Events), then stop the writers."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if not self._busy():
                break
            await asyncio.sleep(0.02)
        for task in self._writers:
            task.cancel()
        await asyncio.gather(*self._writers, return_exceptions=True)
        self._writers = []

    def _queue_status(
        self,
        policy: ScalingPolicy,
        decision: ScaleDecision,
        outcome: ActuationOutcome,
        reason: str,
        current: int | None,
    ) -> None:
        key = policy.key
        status = policy_status(
            self._status.get(key),
            policy=policy,
            decision=decision,
            outcome=outcome,
            reason=reason,
            current_replicas=current,
            now=_now_iso(),
        )
        self._status[key] = status
        self._status_pending[key] = (policy, status, decision.decision_id)
        self._status_wake.set()
        self._ensure_writers()

    async def _status_loop(self) -> None:
        limit = asyncio.Semaphore(8)
        while True:
            await self._status_wake.wait()
            await self._yield_to_decisions()  # more decisions may coalesce meanwhile
            self._status_wake.clear()
            batch, self._status_pending = self._status_pending, {}
            self._writing += 1
            try:

                async def one(p: ScalingPolicy, st: dict[str, Any], decision_id: str) -> None:
                    async with limit:
                        await self._write_status(p, st, decision_id)

                await asyncio.gather(*(one(*item) for item in batch.values()))
            finally:
                self._writing -= 1

    async def _write_status(
        self, policy: ScalingPolicy, status: dict[str, Any], decision_id: str
    ) -> None:
        key = policy.key
        try:
            await self._call(
                f"status of {key}",
                lambda: self.kube.merge_patch(
                    POLICY_API,
                    POLICY_PLURAL,
                    policy.metadata.name,
                    {"status": status},
                    namespace=policy.metadata.namespace,
                    subresource="status",
                    field_manager=self.settings.field_manager,
                ),
                side=True,
            )
        except KubeError as e:
            STATUS_ERRORS.inc()
            log.warning(
                "status of ScalingPolicy %s not written: %s",
                key,
                e,
                extra={"policy": key, "decision_id": decision_id},
            )

    def _queue_event(
        self,
        policy: ScalingPolicy,
        decision: ScaleDecision,
        outcome: ActuationOutcome,
        reason: str,
        obj: dict[str, Any] | None,
        result: dict[str, Any] | None,
        from_replicas: int | None,
    ) -> None:
        body = self._event_body(policy, decision, outcome, reason, obj, result, from_replicas)
        try:
            self._events.put_nowait(
                (policy.metadata.namespace, body, decision.workload, decision.decision_id)
            )
        except asyncio.QueueFull:
            EVENTS_DROPPED.inc()
            log.warning(
                "event queue full: no Event for %s",
                decision.decision_id,
                extra={"workload": decision.workload, "decision_id": decision.decision_id},
            )
        self._ensure_writers()

    async def _event_loop(self) -> None:
        """Events in arrival order, a batch at a time (after yielding to decisions once)."""
        limit = asyncio.Semaphore(8)

        async def one(ns: str, body: dict[str, Any], workload: str, decision_id: str) -> None:
            async with limit:
                try:
                    await self._call(
                        f"event on {workload}",
                        lambda: self.kube.create("v1", "events", body, namespace=ns),
                        side=True,
                    )
                except KubeError as e:
                    log.warning(
                        "event on %s not created: %s",
                        workload,
                        e,
                        extra={"workload": workload, "decision_id": decision_id},
                    )

        while True:
            batch = [await self._events.get()]
            self._writing += 1
            try:
                await self._yield_to_decisions()
                while not self._events.empty() and len(batch) < 256:
                    batch.append(self._events.get_nowait())
                await asyncio.gather(*(one(*item) for item in batch))
            finally:
                self._writing -= 1

    def _event_body(
        self,
        policy: ScalingPolicy,
        decision: ScaleDecision,
        outcome: ActuationOutcome,
        reason: str,
        obj: dict[str, Any] | None,
        result: dict[str, Any] | None,
        from_replicas: int | None,
    ) -> dict[str, Any]:
        ref = policy.spec.target_ref
        ns = policy.metadata.namespace
        meta = (result or obj or {}).get("metadata") or {}
        involved: dict[str, Any] = {
            "apiVersion": ref.api_version,
            "kind": ref.kind,
            "name": ref.name,
            "namespace": ns,
        }
        if meta.get("uid"):
            involved["uid"] = meta["uid"]
        if outcome == "applied":
            event_reason, kind = "GovernorScaled", "Normal"
            message = (
                f"scaled {from_replicas}->{decision.to_replicas} "
                f"(seq {decision.seq}, {decision.decision_id}): {reason}"
            )
        elif outcome == "noop":
            event_reason, kind = "GovernorUnchanged", "Normal"
            message = f"seq {decision.seq} ({decision.decision_id}): {reason}"
        elif outcome == "refused":
            event_reason, kind = "GovernorRefused", "Warning"
            message = f"refused seq {decision.seq} ({decision.decision_id}): {reason}"
        else:
            event_reason, kind = "GovernorFailed", "Warning"
            message = f"seq {decision.seq} ({decision.decision_id}) failed: {reason}"
        now = _now_iso()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{ref.name}.", "namespace": ns},
            "involvedObject": involved,
            "reason": event_reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": "governor-actuator"},
            "reportingComponent": "governor.dev/actuator",
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        return body


def _fence_lost(e: KubeError) -> bool:
    """A failed JSON patch `test` (the fence moved: another writer was first) or a write conflict.

    The API server answers a failed `test` op with a bare 422: reason Invalid, the message "the
    server rejected our request due to an error in our request" and NO details -- unlike a
    validation error (a bad value, a CEL rule of the target's CRD), whose details list the causes
    by field. So a 422 without causes means the patch could not be applied to the object as it
    is now: re-read it and plan again (which refuses a decision the other writer made stale).
    """
    if e.status == 409:
        return True
    return e.status == 422 and not e.details.get("causes")
