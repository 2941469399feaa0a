"""The Kubernetes side of the actuator: one ScaleDecision in, one Actuation out.

Everything that decides is the core `governor.cores.actuator` (`decide`, on the rules of
`governor.policy.actuation`); this module reads what `decide` asks for from the API server (the
ScalingPolicy, HPAs and ScaledObjects, the target) and writes what it returns (the fenced patch,
the ScalingPolicy status, an Event). Every API call goes through
`call`: a client-side QPS budget (token bucket) and retries with backoff on 429, 5xx and no
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
from typing import Any, TypeVar

from governor import targets
from governor.cores import actuator as actuator_core
from governor.cores.actuator import UNREAD, Need, Owners, Refused, TargetRead, Unread, decide
from governor.events import Actuation, ActuationOutcome, ScaleDecision
from governor.kube import Kube, KubeError
from governor.policy import actuation as core
from governor.policy import pacing
from governor.policy.status import policy_status
from governor.spec import PolicyError, ScalingPolicy
from governor_actuator.cache import PolicyIndex, TtlCache
from governor_actuator.config import ActuatorSettings
from governor_actuator.metrics import (
    ACTUATIONS,
    DECISION_TO_PATCH,
    EVENTS_DROPPED,
    KUBE_ERRORS,
    STATUS_ERRORS,
)

log = logging.getLogger("governor.actuator")

T = TypeVar("T")

POLICY_API = "governor.dev/v1alpha1"
POLICY_PLURAL = "scalingpolicies"


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        self._scale_paths: dict[tuple[str, str], str] = {}  # (group, plural) -> specReplicasPath
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

    async def call(self, what: str, fn: Callable[[], Awaitable[T]], *, side: bool = False) -> T:
        """`fn()` within the budget (`side`: the status and Event writes' own), retried."""
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
                obj = await self.call(
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
        items = await self.call(
            f"list ScalingPolicies in {namespace}",
            lambda: self.kube.list_objects(POLICY_API, POLICY_PLURAL, namespace=namespace),
        )
        return PolicyIndex(items)

    async def _owners_of(self, namespace: str) -> tuple[list[Any], list[Any]]:
        return await self._owners.get(namespace, lambda: self._list_owners(namespace))

    async def _list_owners(self, namespace: str) -> tuple[list[Any], list[Any]]:
        hpas, sos = await asyncio.gather(
            self.call(
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
            return await self.call(
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
        """Where the target's replicas live (`governor.targets`); a CRD's scale subresource is
        read once per (group, plural). "": a CRD without one; None: the object says (a Volcano
        Job's task)."""
        ref = policy.spec.target_ref
        kind = targets.kind_of(ref)
        scale_path = None
        if kind.needs_scale_subresource(ref):
            group = core.api_group(ref.api_version)
            key = (group, plural)
            if key not in self._scale_paths:
                scale = await self.call(
                    f"get CRD {plural}.{group}", lambda: self.kube.crd_scale(group, plural)
                )
                if scale is None:
                    return ""
                self._scale_paths[key] = scale.spec_replicas_path
            scale_path = self._scale_paths[key]
        return kind.replicas_pointer(ref, scale_path)

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
        """Read what `cores.actuator.decide` asks for until it answers, then send the patch;
        a moved fence re-reads the target and decides again."""
        policy: ScalingPolicy | PolicyError | Unread | None = UNREAD
        owners: Owners | Unread = UNREAD
        target: TargetRead | Unread = UNREAD
        located: tuple[str, str | None] | None = None  # (plural, pointer), found once
        for attempt in range(1, self.settings.fence_attempts + 1):
            while isinstance(verdict := decide(decision, policy, owners, target, self.rules), Need):
                if verdict.what == "policy":
                    policy = await self._policy(decision)
                elif verdict.what == "owners":
                    assert isinstance(policy, ScalingPolicy)
                    owners = Owners(*await self._owners_of(policy.metadata.namespace))
                else:
                    assert isinstance(policy, ScalingPolicy)
                    located = located or await self._locate(policy)
                    target = await self._read_target(decision, policy, located)
            known = policy if isinstance(policy, ScalingPolicy) else None
            obj = dict(target.obj) if isinstance(target, TargetRead) and target.obj else None
            if isinstance(verdict, Refused):
                return await self._refused(
                    decision, known, verdict.state, verdict.refusal, notify=verdict.notify, obj=obj
                )
            if isinstance(verdict, actuator_core.Replayed):
                # The audit record of a patch whose first one was lost; quiet: its Event and
                # status are not written twice (the other actuator may be the one replaying).
                why = f"seq {decision.seq} already applied (the target's fence holds it); no patch"
                return await self._finish(decision, known, verdict.state, "replay", why, obj,
                                          None, code="replay", quiet=True)  # fmt: skip
            assert known is not None and located is not None
            try:
                result = await self._patch(decision, known, located[0], verdict.plan.patch)
            except KubeError as e:
                what = actuator_core.patch_error(
                    e.status, bool(e.details.get("causes")), attempt, self.settings.fence_attempts
                )
                if what == "reread":
                    log.info(
                        "fence moved under %s (attempt %d): re-reading",
                        decision.workload,
                        attempt,
                        extra={"workload": decision.workload, "decision_id": decision.decision_id},
                    )
                    target = UNREAD
                    continue
                if what == "rejected":
                    return await self._finish(
                        decision,
                        known,
                        verdict.state,
                        "failed",
                        f"rejected: {e}",
                        obj,
                        None,
                        code=f"kube_{e.status}",
                    )
                raise
            DECISION_TO_PATCH.observe(max(0.0, time.time() - decision.decided_at))
            outcome = actuator_core.outcome_of(verdict, self.settings.dry_run)
            text = core.reason_text(decision.reasons)
            if outcome == "noop":
                text = f"replicas already {decision.to_replicas}; {text}"
            return await self._finish(
                decision, known, verdict.state, outcome, text, obj, result, plan=verdict.plan
            )
        raise KubeError(409, "Conflict", f"fence kept moving under {decision.workload}") from None

    async def _locate(self, policy: ScalingPolicy) -> tuple[str, str | None]:
        """The target kind's plural (discovery) and where its replicas live ("" when a CRD has
        no scale subresource; None when the object says: a Volcano Job)."""
        ref = policy.spec.target_ref
        res = await self.call(
            f"discover {ref.kind}", lambda: self.kube.resource(ref.api_version, ref.kind)
        )
        return res.plural, await self._replicas_pointer(policy, res.plural)

    async def _read_target(
        self, decision: ScaleDecision, policy: ScalingPolicy, located: tuple[str, str | None]
    ) -> TargetRead:
        plural, pointer = located
        if pointer == "":
            return TargetRead(scalable=False)
        ref, ns = policy.spec.target_ref, policy.metadata.namespace
        try:
            obj = await self.call(
                f"get {decision.workload}",
                lambda: self.kube.get(ref.api_version, plural, ref.name, namespace=ns),
            )
        except KubeError as e:
            if e.not_found:
                return TargetRead(pointer=pointer, obj=None)
            raise
        return TargetRead(pointer=pointer, obj=obj)

    async def _patch(
        self, decision: ScaleDecision, policy: ScalingPolicy, plural: str, ops: list[Any]
    ) -> dict[str, Any]:
        ref = policy.spec.target_ref
        return await self.call(
            f"patch {decision.workload}",
            lambda: self.kube.json_patch(
                ref.api_version,
                plural,
                ref.name,
                ops,
                namespace=policy.metadata.namespace,
                dry_run=self.settings.dry_run,
                field_manager=self.settings.field_manager,
            ),
        )

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
            await self.call(
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
        meta = (result or obj or {}).get("metadata") or {}
        body = actuator_core.event(
            policy, decision, outcome, reason, meta, from_replicas,
            instance=self._instance, now=_now_iso(),
        )  # fmt: skip
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
                    await self.call(
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
